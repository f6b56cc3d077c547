"""The straight-line form of a repro script, for a scenario that never trains: at most one
initialize, and the user's own writes and deletes (issue 28's 60-line budget is for these).

No operation dispatcher, no stand-in engine: the tree is built, the user's attributes recorded,
then each operation is its own few lines (deepspeed.initialize, or under --plain a stand-in that
returns the model itself), each followed by the checks; `verdict` prints REPRODUCED or NOT
REPRODUCED and exits 1 or 0. The checks and the stand-in are repro_runtime.py's, copied as the
general form copies them; the scenario's own code comes from repro_script.py's helpers, so both
forms build the same model and skip the same writes.
"""

import ast
import pprint
import textwrap

from . import repro_runtime, schema, tree
from .deepspeed_adapter import deepspeed_config
from .scenario import TensorLiteral
from .repro_script import (_OWNER_CHECKS, _build, _comment, _copied, _header, _module_source,
                           _names_used, _optimizer_source, _user_optimizer_source, _placement_setup, _rule,
                           _verdict, _without_unused, _write_block)

_OPS = schema.some("ops", "initialize", "set_attr", "del_attr")
_INVARIANTS = schema.some("invariants", "I1", "I2") + ("op",)


def fits(plan, target):
    """Whether the scenario and target take the straight-line form: no forward, backward, step or
    release, at most one initialize, and a finding at an operation (no teardown to replay)."""
    return (target["invariant"] in _INVARIANTS and plan.initializes <= 1
            and all(op.op in _OPS for op in plan.scenario.ops)
            and (target.get("op_index") is not None or not plan.initializes))


def text(plan, target, script_name, stage, produced_on):
    plan.features = str(plan.scenario.features)  # no forward: only the constructors name it
    # The target's own check (an exception needs none; it keeps both, for what they show).
    checks = ["check_user_attrs"] if target["invariant"] != "I2" else []
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
_FORM_REASONS = {"same": "the user's values are no tensors or lists: the plain rules compare and show",
                 "show": "the user's values are no tensors or lists: the plain rules compare and show",
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
    if "gradient_clipping" not in s.config:
        del config["gradient_clipping"]  # the replay's 0.0 matters to a step, and none runs here
    config["zero_optimization"] = dict(config["zero_optimization"], stage=stage)
    lines = ['if sys.argv[1:] not in ([], ["--plain"]):',
             '    print(f"usage: {sys.argv[0]} [--plain]", file=sys.stderr)',
             "    sys.exit(2)",
             'PLAIN = sys.argv[1:] == ["--plain"]',
             f"SIGNATURE = {target['signature']!r}"]
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
              + "; zero_allow_untested_optimizer lets ZeRO take SGD (it changes nothing else).",
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
    lines = []
    for i, op in enumerate(plan.scenario.ops):
        lines.append("")
        lines += (_initialize(plan, i, op, target["invariant"]) if op.op == "initialize"
                  else _write_block(plan, i, op))
        lines += [f"{check}({i})" for check in checks]
    return "\n".join(lines)


def _initialize(plan, i, op, invariant):
    what = "the root" if op.target == "" else f"module {op.target!r}"
    try:
        module = plan.built.root.get_submodule(op.target)
    except Exception:
        return [_comment(f"op {i}: initialize {what}: skipped, no module at this path")]
    if op.optimizer == "fresh" and not any(p.requires_grad for p in module.parameters()):
        return [_comment(f"op {i}: initialize {what} with a fresh optimizer: skipped, it has no "
                         f"trainable parameters")]
    source = _module_source(op.target)
    # The user's optimizer built where it is used, the scenario's only initialize.
    optimizer = (_user_optimizer_source(plan) if op.optimizer == "same"
                 else _optimizer_source(plan.scenario, f"trainable({source})"))
    call = f"initialize({source}, {optimizer}, CONFIG)"
    if len(call) > 100:
        call = f"initialize({source},\n           {optimizer}, CONFIG)"
    lines = [_comment(f"op {i}: initialize {what} with "
                      + ("the user's optimizer" if op.optimizer == "same" else "a fresh optimizer"))]
    if invariant != "op":
        # Raising is not this finding: the traceback ends the run without a verdict (for a
        # bisection, a commit where the script cannot run).
        return lines + [call]
    return lines + ["try:", "    " + call.replace("\n", "\n    "), "except ERRORS as e:",
                    f'    op_failed({i}, "initialize", e)']
