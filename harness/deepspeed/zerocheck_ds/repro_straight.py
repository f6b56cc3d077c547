"""The straight-line form of a repro script (issue 28's budgets: 60 code lines for one
operation, 150 for up to five): the user's own writes and deletes, an initialize, and training
(forward, backward, step, zero_grad) and repeated initializes through the root's engine when the
root is initialized first.

No operation dispatcher: the tree is built, the user's attributes recorded, then each operation
is its own few lines (repro_runtime.initialize: deepspeed.initialize, or under --plain the model
itself, or where the script trains PlainEngine; a repeat a correct engine refuses goes through
repro_runtime.repeat_initialize, I5), each followed by the target's own check; `verdict` prints
REPRODUCED or NOT REPRODUCED and exits 1 or 0. What the replay decides at run time about
training is decided here from the scenario alone (a backward without a forward, a step without a
backward: skipped, as DeepSpeed's loop needs), and a script that trains or repeats ends at the
finding's operation. The checks, the stand-ins and the seeded values are repro_runtime.py's,
copied as the general form copies them; the scenario's own code comes from repro_script.py's
helpers, so both forms build the same model and skip the same writes.
"""

import ast
import pprint
import textwrap

from . import repro_runtime, schema, tree
from .deepspeed_adapter import deepspeed_config
from .scenario import TensorLiteral
from .repro_script import (_OWNER_CHECKS, _build, _comment, _copied, _header, _module_source,
                           _names_used, _optimizer_source, _user_optimizer_source, _verdict,
                           _without_unused, _write_block)

_OPS = schema.some("ops", "initialize", "set_attr", "del_attr")
_TRAINING_OPS = schema.some("ops", "forward", "backward", "step", "zero_grad")
_INVARIANTS = schema.some("invariants", "I1", "I2", "I5") + ("op",)


def fits(plan, target):
    """Whether the scenario and target take the straight-line form: no release, a finding at an
    operation (no teardown to replay), and at most one initialize; or, for training and repeated
    initializes, the root's engine first (every later initialize a correct engine refuses, every
    forward through it), with trainable parameters, and no route for an MoE to take."""
    ops = plan.scenario.ops
    return (target["invariant"] in _INVARIANTS and all(op.op in _OPS + _TRAINING_OPS for op in ops)
            and (target.get("op_index") is not None or not plan.initializes)
            and (_through_the_root(plan, target) if _trains(plan) or plan.initializes > 1
                 else target["invariant"] != "I5"))


def _trains(plan):
    return any(op.op in _TRAINING_OPS for op in plan.scenario.ops)


def _through_the_root(plan, target):
    ops = plan.scenario.ops
    first = next((i for i, op in enumerate(ops) if op.op == "initialize"), len(ops))
    return (first < len(ops) and ops[first].target == ""
            and all(op.op in schema.some("ops", "set_attr", "del_attr") for op in ops[:first])
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
        checks.append(_OWNER_CHECKS[plan.placement.kind])
    # After the build only where the finding may show there (the general form always checks).
    build = _build(plan, checks if target.get("op_index") is None else ())
    steps = [_settings(plan, target, stage),
             build + "\n\n" + _operations(plan, target, checks), _verdict(target)]
    forms = _forms(plan, target, _names_used("\n".join(steps)))
    if forms:
        reasons = dict.fromkeys(_FORM_REASONS[name] for name in forms)  # each once, in order
        steps.insert(1, "".join(f"# {reason};\n" for reason in reasons)
                     + ", ".join(forms) + " = " + ", ".join(forms.values()))
    used, bound = _names_used("\n".join(steps)), forms
    copied = [_copied("the model's classes", tree, used),
              _copied("failures, the checks and the verdict", repro_runtime, used, bound)]
    body = _without_unused(steps[:1] + copied + steps[1:])
    sections = [_header(plan, target, script_name, _names_used("\n".join(body)), stage,
                        produced_on)] + body
    return "\n\n\n".join(s.strip("\n") for s in sections if s) + "\n"


# Why a script binds a general runtime function to its simpler form (repro_runtime's tables).
_PLAIN_VALUES = "the user's values are no tensors or lists: the plain rules compare and show"
_FORM_REASONS = {"same": _PLAIN_VALUES, "show": _PLAIN_VALUES,
                 "fail_once": "every check runs once: nothing to report only once"}


def _forms(plan, target, used):
    """name -> its simpler form, for the general runtime functions this script's steps need
    (directly or through what they call) where the simpler one does the same job here."""
    forms = {} if _writes_tensors_or_lists(plan.scenario) else dict(repro_runtime.PLAIN_FORMS)
    if len(plan.scenario.ops) + (target.get("op_index") is None) == 1:
        forms.update(repro_runtime.ONCE_FORMS)
    needed = repro_runtime.closure(used & set(repro_runtime.definitions(repro_runtime)))
    return {name: form for name, form in forms.items() if name in needed}


def _settings(plan, target, stage):
    s = plan.scenario
    config = deepspeed_config(s.config)
    if "gradient_clipping" not in s.config and all(op.op != "step" for op in s.ops):
        del config["gradient_clipping"]  # the replay's 0.0 matters to a step, and none runs here
    config["zero_optimization"] = dict(config["zero_optimization"], stage=stage)
    lines = ['if sys.argv[1:] not in ([], ["--plain"]):',
             '    print(f"usage: {sys.argv[0]} [--plain]", file=sys.stderr)',
             "    sys.exit(2)",
             'PLAIN = sys.argv[1:] == ["--plain"]',
             f"SIGNATURE = {target['signature']!r}"]
    if plan.runs_forward:  # the seeded micro-batches: the numbers, and this process's rank
        lines += [f"SEED, BATCH, FEATURES = {s.seed}, {s.batch}, {s.features}",
                  'RANK = int(os.environ.get("RANK", "0"))']
    if s.world_size > 1:
        lines.append('PREFIX = f"[rank {os.environ.get(\'RANK\', \'0\')}] " '
                     'if os.environ.get("WORLD_SIZE", "1") != "1" else ""')
    else:
        lines.append('PREFIX = ""')
    if plan.placement.kind == "attr_mod":
        lines.append(f"SCENARIO_WORLD_SIZE = {s.world_size}  # placement (I2) uses it")
    if "train_batch_size" in config:
        lines.append("# train_batch_size is sized for the scenario's world size: run one process "
                     "per rank.")
    lines += [f"# ZeRO stage {stage}" + ("" if stage == 3 else " (the scenario's is 3)")
              + "; zero_allow_untested_optimizer lets ZeRO take SGD (it changes nothing else)"
              + ("; gradient_clipping 0.0: none (master's default is 1.0), as in the replay."
                 if "gradient_clipping" in config else "."),
              "CONFIG = " + _wrapped(config)]
    return "\n".join(lines)


def _wrapped(value):
    """repr(value) in lines of at most 100 columns, where breaking at spaces keeps it the same
    value (no string holding a space is cut); else one item a line."""
    text = "\n".join(textwrap.wrap(repr(value), width=100, initial_indent=" " * 9,
                                       subsequent_indent="    ", break_long_words=False)).lstrip()
    if ast.literal_eval(text) == value:
        return text
    return pprint.pformat(value, width=92, sort_dicts=False).replace("\n", "\n" + " " * 9)


def _writes_tensors_or_lists(scenario):
    values = [entry.value for node in scenario.tree for entry in node.attrs]
    values += [entry.value for node in scenario.tree for entries in node.param_attrs.values()
               for entry in entries]
    values += [op.value for op in scenario.ops if op.op == "set_attr"]
    return any(isinstance(v, (TensorLiteral, tuple)) for v in values)


def _operations(plan, target, checks):
    ops, engine = plan.scenario.ops, _trains(plan) or plan.initializes > 1
    # Where the script trains or repeats, it ends at the finding's operation: what follows
    # cannot make the finding show first.
    last = target["op_index"] if engine else len(ops) - 1
    lines, forward, backward = [], False, False  # a loss pending; a backward since the step
    optimizers = []  # the sources of the optimizers given to initialize so far
    for i, op in enumerate(ops[:last + 1]):
        lines.append("")
        # An operation raising is the finding at its own operation (at any, where none is named).
        wrap = target["invariant"] == "op" and target.get("op_index") in (None, i)
        if op.op == "initialize":
            block = _initialize(plan, i, op, wrap, engine, optimizers)
        elif op.op in _TRAINING_OPS:
            block, forward, backward = _training(i, op, forward, backward)
            if wrap and len(block) > 1:
                block = [block[0], "try:"] + ["    " + line for line in block[1:]] + [
                    "except ERRORS as e:", f"    op_failed({i}, {op.op!r}, e)"]
        else:
            block = _write_block(plan, i, op)
        lines += block + [f"{check}({i})" for check in checks]
    if last < len(ops) - 1:
        after = (f"op {last + 1} comes" if last + 2 == len(ops)
                 else f"ops {last + 1} to {len(ops) - 1} come")
        lines += ["", _comment(f"{after} after the finding's operation: left out")]
    return "\n".join(lines)


def _training(i, op, forward, backward):
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


def _initialize(plan, i, op, wrap, engine, optimizers):
    """The lines of an initialize. `wrap`: in a try that records it raising (the finding);
    `engine`: the script trains or repeats through the root's engine, the first initialize;
    `optimizers`: the sources of those given to the initializes before, extended."""
    what = "the root" if op.target == "" else f"module {op.target!r}"
    try:
        module = plan.built.root.get_submodule(op.target)
    except Exception:
        return [_comment(f"op {i}: initialize {what}: skipped, no module at this path")]
    if op.optimizer == "fresh" and not any(p.requires_grad for p in module.parameters()):
        return [_comment(f"op {i}: initialize {what} with a fresh optimizer: skipped, it has no "
                         f"trainable parameters")]
    source = _module_source(op.target)
    lines = [_comment(f"op {i}: initialize {what} with "
                      + ("the user's optimizer" if op.optimizer == "same"
                         else "a fresh optimizer"))]
    fresh = _optimizer_source(plan.scenario, f"trainable({source})")
    if optimizers:  # the root's engine manages every module: a correct engine refuses this one
        optimizer = "user_optimizer" if op.optimizer == "same" else f"optimizer{i}"
        if op.optimizer == "fresh":
            lines.append(f"{optimizer} = {fresh}")
        optimizers.append(optimizer)
        why = "a live engine already manages the target or one of its modules"
        return lines + ["#   " + why + ": must be refused", _fitted(
            f"repeat_initialize({i}, {why!r}, "
            f"[{', '.join(dict.fromkeys(['user_optimizer'] + optimizers))}], "
            f"lambda: initialize({source}, {optimizer}, copy.deepcopy(CONFIG)), "
            f"lambda x: engine(x.to(engine.device)))")]
    if plan.initializes > 1:  # the user's optimizer is named: a repeat may be given it too
        optimizer = "user_optimizer" if op.optimizer == "same" else f"optimizer{i}"
        if op.optimizer == "fresh":
            lines.append(f"{optimizer} = {fresh}")
        optimizers.append(optimizer)
    else:  # the user's optimizer built where it is used, the scenario's only initialize
        optimizer = _user_optimizer_source(plan) if op.optimizer == "same" else fresh
    # DeepSpeed annotates the config it is given: a repeat gets a fresh copy of it.
    config = "copy.deepcopy(CONFIG)" if plan.initializes > 1 else "CONFIG"
    # Where the script trains or repeats, the engine it goes through (under --plain, PlainEngine).
    call = _fitted(f"engine, *_ = initialize({source}, {optimizer}, {config}, PlainEngine)"
                   if engine else f"initialize({source}, {optimizer}, {config})")
    if not wrap:
        # Raising is not this finding: the traceback ends the run without a verdict (for a
        # bisection, a commit where the script cannot run).
        return lines + [call]
    return lines + ["try:", "    " + call.replace("\n", "\n    "), "except ERRORS as e:",
                    f'    op_failed({i}, "initialize", e)']


def _fitted(call):
    """A call in lines of at most 100 columns where its arguments allow: each line ends at an
    argument's comma, the next under the first argument."""
    opening, depth, commas = call.index("(") + 1, 0, []
    for i, c in enumerate(call):  # the commas between the call's own arguments
        depth += (c in "([{") - (c in ")]}")
        if c == "," and depth == 1 and i >= opening:
            commas.append(i)
    lines, start = [], 0
    while len(call) - start + (opening if lines else 0) > 100:
        width = 100 - (opening if lines else 0)
        fitting = [i for i in commas if start < i < start + width]
        if not fitting:
            break
        lines.append(call[start:fitting[-1] + 1])
        start = fitting[-1] + 2
    lines.append(call[start:])
    return ("\n" + " " * opening).join(lines)
