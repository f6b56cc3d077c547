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
from .repro_script import (_OWNER_CHECKS, _build, _comment, _copied, _header, _module_source,
                           _names_used, _optimizer_source, _placement_setup, _rule,
                           _verdict, _without_unused, _write_block)

_OPS = schema.some("ops", "initialize", "set_attr", "del_attr")
_INVARIANTS = ("I1", "I2", "op")


def fits(plan, target):
    """Whether the scenario and target take the straight-line form: no forward, backward, step or
    release, at most one initialize, and a finding at an operation (no teardown to replay)."""
    return (target["invariant"] in _INVARIANTS and plan.initializes <= 1
            and all(op.op in _OPS for op in plan.scenario.ops)
            and (target.get("op_index") is not None or not plan.initializes))


def text(plan, target, script_name, stage, produced_on):
    checks = ["check_user_attrs"]
    if plan.placement.kind != "none":
        checks.append(_OWNER_CHECKS[plan.placement.kind])
    steps = [_settings(plan, target, stage), _engine(plan),
             _build(plan, checks) + "\n\n" + _operations(plan, checks), _verdict(target)]
    used = _names_used("\n".join(steps))
    copied = [_copied("the model's classes", tree, used),
              _copied("failures, the checks and the verdict", repro_runtime, used)]
    body = _without_unused(steps[:1] + copied + steps[1:])
    sections = [_header(plan, target, script_name, _names_used("\n".join(body)), stage,
                        produced_on)] + body
    return "\n\n\n".join(s.strip("\n") for s in sections if s) + "\n"


def _settings(plan, target, stage):
    s = plan.scenario
    config = dict(s.config, **deepspeed_config({}))
    config["zero_optimization"] = dict(config["zero_optimization"], stage=stage)
    lines = ['if sys.argv[1:] not in ([], ["--plain"]):',
             '    print(f"usage: {sys.argv[0]} [--plain]", file=sys.stderr)',
             "    sys.exit(2)",
             'PLAIN = sys.argv[1:] == ["--plain"]',
             f"SIGNATURE = {target['signature']!r}",
             f"FEATURES = {s.features}"]
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
              + "; zero_allow_untested_optimizer lets ZeRO take SGD (it changes nothing else);",
              "# gradient_clipping 0.0: none (master's default is 1.0), as in the replay.",
              "CONFIG = " + _wrapped(config)]
    return "\n".join(lines)


def _wrapped(value):
    """repr(value) in lines of at most 100 columns, where breaking at spaces keeps it the same
    value (no string holding a space is cut); else one item a line."""
    text = "\n    ".join(textwrap.wrap(repr(value), width=92, break_long_words=False))
    if ast.literal_eval(text) == value:
        return text
    return pprint.pformat(value, width=92, sort_dicts=False).replace("\n", "\n" + " " * 9)


def _engine(plan):
    if not plan.initializes:
        return ""
    return "\n".join([_rule("the engine: DeepSpeed, or the model itself under --plain"), "",
                      "if PLAIN:", "    initialize = plain_initialize", "else:",
                      "    import deepspeed", "", "    one_rank_environment()",
                      "    initialize = deepspeed.initialize"])


def _operations(plan, checks):
    lines = []
    for i, op in enumerate(plan.scenario.ops):
        lines.append("")
        lines += (_initialize(plan, i, op) if op.op == "initialize"
                  else _write_block(plan, i, op))
        lines += [f"{check}({i})" for check in checks]
    return "\n".join(lines)


def _initialize(plan, i, op):
    what = "the root" if op.target == "" else f"module {op.target!r}"
    try:
        target = plan.built.root.get_submodule(op.target)
    except Exception:
        return [_comment(f"op {i}: initialize {what}: skipped, no module at this path")]
    if op.optimizer == "fresh" and not any(p.requires_grad for p in target.parameters()):
        return [_comment(f"op {i}: initialize {what} with a fresh optimizer: skipped, it has no "
                         f"trainable parameters")]
    source = _module_source(op.target)
    optimizer = ("user_optimizer" if op.optimizer == "same"
                 else _optimizer_source(plan.scenario, f"trainable({source})"))
    return [_comment(f"op {i}: initialize {what} with "
                     + ("the user's optimizer" if op.optimizer == "same" else "a fresh optimizer")),
            "try:", f"    initialize(model={source}, optimizer={optimizer}, config=CONFIG)",
            "except ERRORS as e:", f'    op_failed({i}, "initialize", e)']
