"""The straight-line form of a repro script (the script-size budgets: 60 code lines for one
operation, 150 for up to five): the user's own writes and deletes, an initialize, and training
(forward, backward, step, zero_grad) and repeated initializes through the root's engine when the
root is initialized first.

No operation dispatcher: the tree is built, the user's attributes recorded, then each operation
is its own few lines (repro_runtime.initialize: deepspeed.initialize, or under --plain the model
itself, or where the script trains PlainEngine; a repeat a correct engine refuses goes through
repro_runtime.repeat_initialize, I5, where the finding is I5's, else it only runs, as the replay
runs it: repeat_initialize_unjudged), each followed by the target's own check; `verdict` prints
REPRODUCED or NOT REPRODUCED and exits 1 or 0. An initialize given an invalid config (the
scenario's config_error) gets that config, made from CONFIG line by line, and is judged as the
replay judges it (repro_runtime.invalid_initialize). CONFIG leaves out what DeepSpeed holds anyway
(DEEPSPEED_DEFAULTS). What the replay decides at run time about training is decided here from
the scenario alone (a backward without a forward, a step without a backward: skipped, as
DeepSpeed's loop needs), and a script that trains or repeats ends at the finding's operation.
The checks, the stand-ins and the seeded values are repro_runtime.py's, copied as the general
form copies them; the scenario's own code comes from repro_script.py's helpers, so both forms
build the same model and skip the same writes.
"""

import ast
import copy
import pprint

from ..engines.deepspeed_adapter import deepspeed_config
from ..findings.signatures import INVALID_CONFIG
from ..model import tree
from ..scenario import config_errors, schema
from ..scenario.config import DEEPSPEED_DEFAULTS
from ..scenario.scenario import TensorLiteral
from . import repro_runtime
from .script_parts import (OWNER_CHECKS, build_section, comment, copied_section, fitted,
                           header_section, module_expression, names_used, optimizer_source,
                           user_optimizer_source, verdict_section, without_unused, write_block)

_OPS = schema.some("ops", "initialize", "set_attr", "del_attr")
_TRAINING_OPS = schema.some("ops", "forward", "backward", "step", "zero_grad")
_INVARIANTS = schema.some("invariants", "I1", "I2", "I5") + ("op",)


def fits(plan, target):
    """Whether the scenario and target take the straight-line form: no release, a finding at an
    operation (no teardown to replay), and at most one initialize (an I5 finding only where it is
    given an invalid config); or, for training and repeated initializes, the root's engine first
    (every later initialize a correct engine refuses, every forward through it; before it only
    the user's writes and initializes given an invalid config), with trainable parameters, and no
    route for an MoE to take."""
    ops = plan.scenario.ops
    return (target["invariant"] in _INVARIANTS and all(op.op in _OPS + _TRAINING_OPS for op in ops)
            and (target.get("op_index") is not None or not plan.initializes)
            and (_through_the_root(plan, target) if _trains(plan) or plan.initializes > 1
                 else target["invariant"] != "I5" or target.get("attribute") == INVALID_CONFIG))


def _valid_initialize(op):
    return op.op == "initialize" and op.config_error is None


def _trains(plan):
    return any(op.op in _TRAINING_OPS for op in plan.scenario.ops)


def _through_the_root(plan, target):
    ops = plan.scenario.ops
    first = next((i for i, op in enumerate(ops) if _valid_initialize(op)), len(ops))
    return (first < len(ops) and ops[first].target == ""
            and all(op.op in _OPS for op in ops[:first])  # the initializes there are invalid
            and target.get("op_index") is not None
            and any(p.requires_grad for p in plan.built.root.parameters())
            and (not any(node.kind == "MoE" for node in plan.scenario.tree)
                 or not any(op.op == "forward" and op.route for op in ops)))


def text(plan, target, script_name, stage, produced_on):
    plan.features = str(plan.scenario.features)
    plan.torch_sequential = True
    # The target's own check (an exception needs none; it keeps both, for what they show; I5's
    # is the repeated initialize itself).
    checks = ["check_user_attrs"] if target["invariant"] in ("I1", "op") else []
    if plan.placement.kind != "none" and target["invariant"] != "I1":
        checks.append(OWNER_CHECKS[plan.placement.kind])
    # After the build only where the finding may show there (the general form always checks).
    plan.placement_world_size = True  # SCENARIO_WORLD_SIZE is the placement's alone here
    build = build_section(plan, checks if target.get("op_index") is None else (),
                          placement=OWNER_CHECKS.get(plan.placement.kind) in checks)
    steps = [settings_section(plan, stage),
             build + "\n\n" + _operations(plan, target, checks), verdict_section(target)]
    used = names_used("\n".join(steps))
    forms = _forms(plan, target, used, checks)
    copied = [copied_section("the model's classes", tree, used),
              copied_section("failures, the checks and the verdict", repro_runtime, used, forms,
                             _forms_note(forms))]
    body = without_unused(steps[:1] + copied + steps[1:])
    sections = [header_section(plan, target, script_name, "\n".join(body), stage,
                               produced_on)] + body
    return "\n\n\n".join(s.strip("\n") for s in sections if s) + "\n"


# Why a script holds a general runtime function's simpler form (repro_runtime's tables).
_PLAIN_VALUES = "the user's values are no tensors or lists"
_FORM_REASONS = {"same": _PLAIN_VALUES, "show": _PLAIN_VALUES,
                 "fail": "no check runs twice, so nothing is to be reported only once"}


def _forms(plan, target, used, checks):
    """name -> its simpler form, for the general runtime functions this script's steps need
    (directly or through what they call) where the simpler one does the same job here."""
    forms = {} if _writes_tensors_or_lists(plan.scenario) else dict(repro_runtime.PLAIN_FORMS)
    # The checks run after every operation the script holds, and after the build where the
    # finding may show there.
    runs = _last_op(plan, target) + 1 + (target.get("op_index") is None)
    if not checks or runs == 1:
        forms.update(repro_runtime.ONCE_FORMS)
    needed = repro_runtime.closure(used & set(repro_runtime.definitions(repro_runtime)))
    return {name: form for name, form in forms.items() if name in needed}


def script_config(config):
    """A copy of a DeepSpeed `config` without the keys that hold DEEPSPEED_DEFAULTS' value
    (gradient_accumulation_steps only where the config has no train_batch_size)."""
    config = copy.deepcopy(config)
    for path, default in DEEPSPEED_DEFAULTS.items():
        if path == ("gradient_accumulation_steps",) and "train_batch_size" in config:
            continue
        section = config
        for key in path[:-1]:
            section = section.get(key, {})
        value = section.get(path[-1])
        if type(value) is type(default) and value == default:
            del section[path[-1]]
    return config


def _forms_note(forms):
    """Comment lines saying which simpler forms the script holds, and why."""
    reasons = {}  # reason -> the names it covers, in order
    for name, form in forms.items():
        reasons.setdefault(_FORM_REASONS[name], []).append(f"{name} is {form}")
    return "".join(comment(f"Here {' and '.join(names)}: {reason}.") + "\n"
                   for reason, names in reasons.items()) + ("\n" if reasons else "")


def settings_section(plan, stage):
    s = plan.scenario
    config = script_config(deepspeed_config(s.config))
    if "gradient_clipping" not in s.config and all(op.op != "step" for op in s.ops):
        del config["gradient_clipping"]  # the replay's 0.0 matters to a step, and none runs here
    config["zero_optimization"] = dict(config["zero_optimization"], stage=stage)
    if stage == 3 and config["zero_optimization"].get("overlap_comm") is True:
        del config["zero_optimization"]["overlap_comm"]  # DeepSpeed's default at stage 3
    lines = ['if sys.argv[1:] not in ([], ["--plain"]):',
             '    print(f"usage: {sys.argv[0]} [--plain]", file=sys.stderr)',
             "    sys.exit(2)",
             'PLAIN = sys.argv[1:] == ["--plain"]']
    plan.config_value = config  # what an initialize given an invalid config breaks
    if plan.runs_forward:  # the seeded micro-batches: the numbers, and this process's rank
        lines += [f"SEED, BATCH, FEATURES = {s.seed}, {s.batch}, {s.features}",
                  'RANK = int(os.environ.get("RANK", "0"))']
    if s.world_size > 1:
        lines.append('PREFIX = f"[rank {os.environ.get(\'RANK\', 0)}] " '
                     'if os.environ.get("WORLD_SIZE", "1") != "1" else ""')
    else:
        lines.append('PREFIX = ""')
    if "train_batch_size" in config:
        lines.append("# train_batch_size is sized for the scenario's world size: run one process "
                     "per rank.")
    clip = config.get("gradient_clipping")
    clip_words = ("." if clip is None else
                  "; gradient_clipping 0.0: none (master's default is 1.0), as in the replay."
                  if not clip else f"; gradient_clipping {clip!r}: the scenario's.")
    lines += [comment(f"ZeRO stage {stage}" + ("" if stage == 3 else " (the scenario's is 3)")
                      + "; zero_allow_untested_optimizer lets ZeRO take SGD (it changes nothing "
                      "else)" + clip_words),
              "CONFIG = " + _wrapped(config)]
    return "\n".join(lines)


def _wrapped(value):
    """repr(value) in lines of at most 100 columns, each but the last ending at an item's comma,
    where that keeps it the same value (no string holding ", " is cut); else one item a line."""
    items = repr(value).split(", ")
    lines = [" " * 9 + items[0]]  # under "CONFIG = "
    for item in items[1:]:
        if len(lines[-1]) + len(", ") + len(item) + len(",") <= 100:
            lines[-1] += ", " + item
        else:
            lines += [lines.pop() + ",", "    " + item]
    text = "\n".join(lines).lstrip()
    if ast.literal_eval(text) == value:
        return text
    return pprint.pformat(value, width=92, sort_dicts=False).replace("\n", "\n" + " " * 9)


def _writes_tensors_or_lists(scenario):
    values = [entry.value for node in scenario.tree for entry in node.attrs]
    values += [entry.value for node in scenario.tree for entries in node.param_attrs.values()
               for entry in entries]
    values += [op.value for op in scenario.ops if op.op == "set_attr"]
    return any(isinstance(v, (TensorLiteral, tuple)) for v in values)


def _last_op(plan, target):
    """The index of the script's last operation: where it trains or repeats, the finding's (what
    follows cannot make the finding show first), else the scenario's last."""
    engine = _trains(plan) or plan.initializes > 1
    return target["op_index"] if engine else len(plan.scenario.ops) - 1


def _operations(plan, target, checks):
    ops, engine = plan.scenario.ops, _trains(plan) or plan.initializes > 1
    last = _last_op(plan, target)
    lines, forward, backward = [], False, False  # a loss pending; a backward since the step
    optimizers = []  # the sources of the optimizers given to initialize so far
    refusable = 0  # initializes so far that may have failed: a repeat, or an invalid config
    for i, op in enumerate(ops[:last + 1]):
        lines.append("")
        # An operation raising is the finding at its own operation (at any, where none is named);
        # after an initialize that may have failed, a training op may raise on the way to another
        # finding (a failed initialize leaves DeepSpeed's hooks on the model): printed, run goes on.
        wrap = target["invariant"] == "op" and target.get("op_index") in (None, i)
        guard = wrap or (refusable > 0 and op.op in _TRAINING_OPS)
        if op.op == "initialize":
            refusable += op.config_error is not None or optimizers != []
        if op.op == "initialize" and op.config_error is not None:
            block = _invalid_initialize(plan, i, op, optimizers)
        elif op.op == "initialize":
            block = _initialize(plan, i, op, wrap, engine, optimizers,
                                judged=target["invariant"] == "I5")
        elif op.op in _TRAINING_OPS:
            block, forward, backward = training_section(i, op, forward, backward)
            if guard and len(block) > 1:
                block = [block[0], "try:"] + ["    " + line for line in block[1:]] + [
                    "except ERRORS as e:", f"    op_failed({i}, {op.op!r}, e)"]
        else:
            block = write_block(plan, i, op)
        lines += block + [f"{check}({i})" for check in checks]
    if last < len(ops) - 1:
        after = (f"op {last + 1} comes" if last + 2 == len(ops)
                 else f"ops {last + 1} to {len(ops) - 1} come")
        lines += ["", comment(f"{after} after the finding's operation: left out")]
    return "\n".join(lines)


def training_section(i, op, forward, backward):
    """(the lines of a training op, whether a loss is pending, whether a backward came since the
    last step), as the replay decides on DeepSpeed."""
    if op.op == "forward":
        return [f"# op {i}: forward", f"x, y = micro_batch({i})",
                "loss = F.mse_loss(engine(x.to(engine.device)), y.to(engine.device))"
                ], True, backward
    if op.op == "backward":
        if not forward:
            return [f"# op {i}: backward: skipped, no forward since the last backward"
                    ], False, backward
        return [f"# op {i}: backward", "engine.backward(loss)"], False, True
    if op.op == "step" and not backward:
        return [f"# op {i}: step: skipped, no backward since the last step (DeepSpeed's step "
                f"needs one)"], forward, False
    return [f"# op {i}: {op.op}", f"engine.{op.op}()"], forward, backward and op.op != "step"


def _initialize(plan, i, op, wrap, engine, optimizers, judged):
    """The lines of an initialize. `wrap`: in a try that records it raising (the finding);
    `engine`: the script trains or repeats through the root's engine, the first initialize;
    `optimizers`: the sources of those given to the initializes before, extended; `judged`: a
    repeat is checked (I5, the finding's invariant), else only run."""
    what = "the root" if op.target == "" else f"module {op.target!r}"
    try:
        module = plan.built.root.get_submodule(op.target)
    except Exception:
        return [comment(f"op {i}: initialize {what}: skipped, no module at this path")]
    if op.optimizer == "fresh" and not any(p.requires_grad for p in module.parameters()):
        return [comment(f"op {i}: initialize {what} with a fresh optimizer: skipped, it has no "
                        f"trainable parameters")]
    source = module_expression(op.target)
    lines = [comment(f"op {i}: initialize {what} with "
                     + ("the user's optimizer" if op.optimizer == "same"
                         else "a fresh optimizer"))]
    fresh = optimizer_source(plan.scenario, f"trainable({source})")
    if optimizers:  # the root's engine manages every module: a correct engine refuses this one
        optimizer = "user_optimizer" if op.optimizer == "same" else f"optimizer{i}"
        if op.optimizer == "fresh":
            lines.append(f"{optimizer} = {fresh}")
        optimizers.append(optimizer)
        why = "a live engine already manages the target or one of its modules"
        again = f"lambda: initialize({source}, {optimizer}, copy.deepcopy(CONFIG))"
        forward = "lambda x: engine(x.to(engine.device))"
        if not judged:  # the I5 checks (the fingerprint, the refusal rule) are its own script's
            return lines + [f"#   {why}: a correct engine refuses",
                            "#   it; I5 judges that, here it only runs as the replay runs it",
                            fitted(f"repeat_initialize_unjudged({i}, {again}, {forward})")]
        return lines + ["#   " + why + ": must be refused", fitted(
            f"repeat_initialize({i}, {why!r}, "
            f"[{', '.join(dict.fromkeys(['user_optimizer'] + optimizers))}], {again}, {forward})")]
    if plan.initializes > 1:  # the user's optimizer is named: a repeat may be given it too
        optimizer = "user_optimizer" if op.optimizer == "same" else f"optimizer{i}"
        if op.optimizer == "fresh":
            lines.append(f"{optimizer} = {fresh}")
        optimizers.append(optimizer)
    else:  # the user's optimizer built where it is used, the scenario's only initialize
        optimizer = user_optimizer_source(plan) if op.optimizer == "same" else fresh
    # DeepSpeed annotates the config it is given: a repeat gets a fresh copy of it.
    config = "copy.deepcopy(CONFIG)" if plan.initializes > 1 else "CONFIG"
    # Where the script trains or repeats, the engine it goes through (under --plain, PlainEngine).
    call = fitted(f"engine, *_ = initialize({source}, {optimizer}, {config}, PlainEngine)"
                  if engine else f"initialize({source}, {optimizer}, {config})")
    if not wrap:
        # Raising is not this finding: the traceback ends the run without a verdict (for a
        # bisection, a commit where the script cannot run).
        return lines + [call]
    return lines + ["try:", "    " + call.replace("\n", "\n    "), "except ERRORS as e:",
                    f'    op_failed({i}, "initialize", e)']


def _invalid_initialize(plan, i, op, optimizers):
    """The lines of an initialize given an invalid config (the scenario's config_error), judged
    as the replay judges it (repro_runtime.invalid_initialize); `optimizers`: the sources of those
    given to the valid initializes before (non-empty: the root's engine is live, and the forward
    that checks training still runs goes through it)."""
    what = "the root" if op.target == "" else f"module {op.target!r}"
    try:
        module = plan.built.root.get_submodule(op.target)
    except Exception:
        return [comment(f"op {i}: initialize {what}: skipped, no module at this path")]
    if op.optimizer == "fresh" and not any(p.requires_grad for p in module.parameters()):
        return [comment(f"op {i}: initialize {what} with a fresh optimizer: skipped, it has no "
                        f"trainable parameters")]
    source = module_expression(op.target)
    lines = [comment(f"op {i}: initialize {what} with "
                     + ("the user's optimizer" if op.optimizer == "same" else "a fresh optimizer")
                     + f" and an invalid config ({op.config_error}: "
                     + schema.CONFIG_ERRORS[op.config_error].rstrip(".")
                     + "): a correct engine refuses it as a configuration error and changes "
                       "nothing")]
    optimizer = "user_optimizer"
    if op.optimizer == "fresh":
        optimizer = f"optimizer{i}"
        lines.append(f"{optimizer} = {optimizer_source(plan.scenario, f'trainable({source})')}")
    broken = config_errors.invalid_config(plan.config_value, op.config_error,
                                          plan.scenario.world_size)
    lines += [f"invalid{i} = copy.deepcopy(CONFIG)"] + _edits(plan.config_value, broken,
                                                                f"invalid{i}")
    forward = ("lambda x: engine(x.to(engine.device))" if optimizers
               else "lambda x: model(x.to(next(model.parameters(), x).device))")
    watched = ", ".join(dict.fromkeys(["user_optimizer", optimizer] + optimizers))
    return lines + [fitted(f"invalid_initialize({i}, {op.config_error!r}, [{watched}], "
                           f"lambda: initialize({source}, {optimizer}, invalid{i}), {forward})")]


def _edits(config, broken, name):
    """The statements that make `name`, a copy of `config`, into `broken` (nested dicts)."""
    lines = []
    for key, value in broken.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            lines += _edits(config[key], value, f"{name}[{key!r}]")
        elif key not in config or config[key] != value:
            lines.append(f"{name}[{key!r}] = {value!r}")
    return lines + [f"del {name}[{key!r}]" for key in config if key not in broken]
