"""Standalone reproduction scripts: one minimised scenario and one finding -> a `bug.py`.

The script a DeepSpeed maintainer runs imports torch, deepspeed (not under --plain) and the
standard library, never zerocheck_ds. It is straight-line code: the model's classes, the tree
built node by node, the user's attributes written with setattr, then one commented block per
operation, each followed by the checks the replay makes (I1, I2, I5, an operation raising). It
ends with `REPRODUCED <signature>: expected ..., got ...` and exit 1 when a failure like the
target shows, else `NOT REPRODUCED <signature>` and exit 0; `--plain` runs the same steps on a
pass-through engine (plain PyTorch), which must not reproduce.

A scenario the straight-line form takes (repro_straight.py: no dispatcher, within the script-size
budgets) gets it; the general form here, with an operation dispatcher and a stand-in DeepSpeed,
is for the rest (releases, a submodule initialized first, routes an MoE takes).

One source of truth: the model classes, the data seeding, the checks, the I5 fingerprint and the
general form's operations are copied into the script from tree.py, repro_runtime.py (which takes the
fingerprint from oracles/fingerprint.py) and general_steps.py with inspect.getsource, so the script
builds the same model, feeds the same numbers and compares the same state as the replay. Only what
the script uses is copied (a definition and what it needs: repro_runtime.source), only the modules
it names are imported, and the pass-through engine has only the methods its operations call: a
scenario without a forward gets no seeded values and no route-taking classes (its containers are
torch's), one with a single initialize no I5 machinery. Which user writes are skipped as not
representable is decided here with the replay's own rule (collisions.PristineNames over a freshly
built tree), and written into the script as comments.

What stays at run time, as in the replay: whether an initialize is a repeat (an earlier one may
have failed), which engine a forward goes through, whether a backward has a loss, whether a
delete finds anything. Differences from the replay: a repeated initialize must raise an error
that repro_runtime.is_refusal accepts (the replay's rule too); a path that did not exist at
generation time is skipped without looking again.
"""

import ast
import copy
import io
import os
import tokenize

from ..engines.deepspeed_adapter import deepspeed_config
from ..findings.verdict import FAILURES
from ..model import tree
from ..oracles.ledger import AttributeLedger, WriteSkipped
from ..replay import state as replay_state
from ..scenario import schema
from ..scenario.collisions import PristineNames
from ..scenario.scenario import load_scenario
from . import general_steps, repro_runtime, repro_straight, repro_twin
from .script_parts import (OWNER_CHECKS, TWIN_INVARIANTS, build_section, comment, copied_section,
                           header_section, module_expression, names_used, optimizer_source, rule,
                           verdict_section, without_methods, without_unused, write_block)

# The script checks what needs no dense twin; an I3 or I6 finding gets one where repro_twin.py's
# form takes its scenario (scripts_for); I3 and I6 elsewhere, I4 and I9 get a minimal scenario and
# a replay command.
TARGET_INVARIANTS = schema.some("invariants", "I1", "I2", "I5") + FAILURES


_CONTAINERS = schema.CONTAINER_KINDS
# Operations by the code block they get.
_PLAIN_OPS = schema.some("ops", "backward", "step", "zero_grad")
_RELEASE_OPS = schema.some("ops", "release", "destroy")
_WRITE_OPS = schema.some("ops", "set_attr", "del_attr")
_BATCH_OPS = schema.some("ops", "initialize", "forward")  # need the seeded batches


def repro_script_text(scenario_path, target, script_name="repro.py", stage=3, produced_on=None):
    """Returns the text of a standalone script reproducing `target` from the scenario file,
    replayed with ZeRO `stage` (the suite's --stage); `produced_on` names what showed the
    finding (e.g. "deepspeed 0.14.5, commit eb07d41f9"), recorded with torch's version.

    `target`: {"signature", "invariant", "op_index", "op", "module_path", "param", "attribute",
    "exception_type"} (only "signature" and "invariant" are required). Raises ScenarioError for a
    bad scenario, ValueError for a bad target.
    """
    _check_target(target)
    plan = _Plan(load_scenario(scenario_path))
    if target["invariant"] in TWIN_INVARIANTS:
        if not repro_twin.fits(plan, target, stage):
            raise ValueError(f"an {target['invariant']} finding gets a script only where the "
                             f"dense-twin form takes its scenario (repro_twin.py): see "
                             f"scripts_for()")
        return repro_twin.text(plan, target, script_name, stage, produced_on)
    if repro_straight.fits(plan, target):
        return repro_straight.text(plan, target, script_name, stage, produced_on)
    if plan.invalid_configs:
        raise ValueError("an initialize given an invalid config (config_error) gets a script only "
                         "where the straight-line form takes its scenario (repro_straight.py): "
                         "see scripts_for()")
    # Teardown (engine.destroy() on the engines left) can matter only to a finding it may show
    # (one at no operation), or where engines are released or repeated anyway.
    plan.teardown = plan.initializes and (target.get("op_index") is None or plan.initializes > 1
                                          or "release" in plan.ops_used)
    # The script's own steps first; then only the definitions they use are copied in (from
    # tree.py and repro_runtime.py), and only the modules they name are imported.
    # The engine comes before the model is built (DeepSpeed imported first, as a user's script
    # does), after the definitions it needs.
    settings = _settings(plan, stage)
    steps = [_engine(plan), build_section(plan), _operations(plan), verdict_section(target)]
    steps.insert(0, _operation_helpers(plan, _names_read("\n".join([settings] + steps))))
    used = names_used("\n".join([settings] + steps))
    copied = [copied_section("the model's classes (every module maps FEATURES -> FEATURES)", tree,
                             used),
              copied_section("failures, the checks and the seeded values of parameters and data",
                             repro_runtime, used)]
    body = without_unused([settings] + copied + steps)
    sections = [header_section(plan, target, script_name, "\n".join(body), stage,
                               produced_on)] + body
    return "\n\n\n".join(s.strip("\n") for s in sections if s) + "\n"


def code_lines(text):
    """The number of lines of code in a script: blank lines, comments and docstrings (the
    module's, classes' and functions') are not code (the script-size budgets count these)."""
    docstrings = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    code = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                              tokenize.DEDENT, tokenize.ENDMARKER):
            code.update(range(token.start[0], token.end[0] + 1))
    return len(code - docstrings)


def scripts_for(scenario_path, target, stage=3):
    """Whether repro_script_text makes a script for `target` on this scenario (no_script_reason
    gives none)."""
    return no_script_reason(scenario_path, target, stage) is None


def no_script_reason(scenario_path, target, stage=3):
    """Why repro_script_text makes no script for `target` on this scenario, in words for the
    report and the issue draft; None where it makes one: for TARGET_INVARIANTS unless an
    initialize is given an invalid config outside the straight-line form, for I3 and I6 where
    the dense-twin form takes the scenario."""
    invariant = target.get("invariant")
    if invariant not in TARGET_INVARIANTS + TWIN_INVARIANTS:
        return (f"an {invariant} finding is judged by the replay's own checks of the partitions "
                f"and of what the ranks hold, which no standalone script carries")
    plan = _Plan(load_scenario(scenario_path))
    if invariant in TWIN_INVARIANTS:
        return None if repro_twin.fits(plan, target, stage) else (
            f"an {invariant} finding gets a script only where the dense-twin form takes its "
            f"scenario (ZeRO stage 3, gradient accumulation 1, eager construction, at most "
            f"{repro_twin.MAX_WORLD} ranks, the root initialized first with the user's optimizer "
            f"and a valid config, the finding at an operation)")
    # The general form has no invalid config to give an initialize: the straight one, or none.
    if plan.invalid_configs and not repro_straight.fits(plan, target):
        return ("an initialize given an invalid config is written only by the straight-line "
                "form, which takes a finding of that initialize or one after the root's engine "
                "trains, not this one")
    return None


def write_repro_script(scenario_path, target, out_path, stage=3, produced_on=None):
    """Writes repro_script_text(...) to `out_path`, executable (0755). Raises as it does."""
    text = repro_script_text(scenario_path, target, os.path.basename(out_path), stage,
                             produced_on)
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(out_path, 0o755)


def _check_target(target):
    if not isinstance(target, dict):
        raise ValueError(f"target must be a dict, got {type(target).__name__}")
    if not isinstance(target.get("signature"), str):
        raise ValueError(f"target['signature'] must be a string, got {target.get('signature')!r}")
    if target.get("invariant") not in TARGET_INVARIANTS + TWIN_INVARIANTS:
        raise ValueError(f"target['invariant'] must be one of "
                         f"{', '.join(TARGET_INVARIANTS + TWIN_INVARIANTS)}, "
                         f"got {target.get('invariant')!r}")


class _Plan:
    """The scenario, its freshly built tree and the replay's rules, evaluated at generation time."""

    def __init__(self, scenario):
        self.scenario = scenario
        self.placement = scenario.placement
        self.built = tree.build_tree(scenario)
        self.ledger = AttributeLedger(self.built)  # only for resolve(): paths as the replay does
        self.names = PristineNames(self.built.root)  # before any write, like the ledger's rule
        self.variable = {id(m): f"n{i}" for i, m in self.built.nodes.items()}
        self.root_takes_route = scenario.tree[0].kind in _CONTAINERS
        self.features = "FEATURES"  # how the constructors name the width (a number, inlined)
        # Whether Sequential nodes may be torch's (no MoE takes a route): the straight form's.
        self.torch_sequential = False
        # Whether the placement section sets SCENARIO_WORLD_SIZE (the straight form's: only
        # placement uses it there), or the settings do.
        self.placement_world_size = False
        # Whether any forward runs (an op, or the probe after a repeated initialize): without
        # one, parameter values and the containers' forward never matter, and the script
        # leaves out the seeded values and the route-taking classes.
        kinds = [op.op for op in scenario.ops]
        self.initializes = kinds.count("initialize")
        self.invalid_configs = any(op.op == "initialize" and op.config_error is not None
                                   for op in scenario.ops)
        self.runs_forward = "forward" in kinds or self.initializes > 1 or self.invalid_configs
        self.ops_used = set(kinds) | ({"release"} if "destroy" in kinds else set())

    def skip_reason(self, obj, key, name):
        """Returns why the replay skips writing `name` on `obj` (the ledger's words), or None."""
        reason = self.names.reason(obj, name)
        return f"not representable upstream: on {key.describe()}, {reason}" if reason else None

    def write_skip_reason(self, module_path, param, name):
        """Returns (why the replay skips this write or None, the object's canonical key)."""
        try:
            obj, key = self.ledger.resolve(module_path, param)
        except WriteSkipped as e:
            return str(e), None
        return self.skip_reason(obj, key, name), key

    def module_source(self, path):
        """The module at `path` as the script names it: its node variable where it has one."""
        module = self.built.root.get_submodule(path)
        return self.variable.get(id(module), f"model.get_submodule({path!r})")


# ---- sections --------------------------------------------------------------------------------

def _config_lines(config, indent):
    # One key a line (a maintainer edits these), a nested dict on one line where it fits.
    lines = []
    for key, value in config.items():
        if isinstance(value, dict) and len(f"{indent}{key!r}: {value!r},") > 96:
            lines += [f"{indent}{key!r}: {{"] + _config_lines(value, indent + "    ")
            lines.append(f"{indent}}},")
        else:
            lines.append(f"{indent}{key!r}: {value!r},")
    return lines


def _settings(plan, stage):
    s = plan.scenario
    config = copy.deepcopy(s.config)
    config["zero_optimization"]["stage"] = stage
    # What deepspeed_adapter.deepspeed_config adds, each key with its reason.
    added = deepspeed_config({})
    batch_size = ""
    if "train_batch_size" in config:
        batch_size = ("\nif WORLD_SIZE != SCENARIO_WORLD_SIZE:\n"
                      "    CONFIG.pop(\"train_batch_size\")  # sized for the scenario's world size")
    config = "\n".join(_config_lines(config, "    "))
    # Only the numbers the script uses: the world size for placement and the batch size, the
    # seed and batch for seeded values.
    numbers = []
    if plan.placement.kind != "none" or batch_size:
        numbers.append(f"SCENARIO_WORLD_SIZE = {s.world_size}  # placement (I2) and batch "
                       f"size use it whatever the real world size")
    numbers.append(f"SEED, FEATURES, BATCH = {s.seed}, {s.features}, {s.batch}"
                   if plan.runs_forward else f"FEATURES = {s.features}")
    numbers = "\n".join(numbers)
    return f'''if sys.argv[1:] not in ([], ["--plain"]):
    print(f"usage: {{sys.argv[0]}} [--plain]", file=sys.stderr)
    sys.exit(2)
PLAIN = sys.argv[1:] == ["--plain"]
RANK = int(os.environ.get("RANK", "0"))
WORLD_SIZE = int(os.environ.get("WORLD_SIZE", "1"))
{numbers}
CONFIG = {{  # ZeRO stage {stage}{" (the scenario's is 3)" if stage != 3 else ""}
{config}
    # ZeRO takes an optimizer it has not tested (SGD) only with this; it changes nothing else.
    'zero_allow_untested_optimizer': {added["zero_allow_untested_optimizer"]!r},
    # No clipping (master's default is 1.0), as in the replay.
    'gradient_clipping': {added["gradient_clipping"]!r},
}}{batch_size}
PREFIX = f"[rank {{RANK}}] " if WORLD_SIZE > 1 else ""'''


def _engine(plan):
    """The engine section: DeepSpeed, or the pass-through stand-in (general_steps.py's, copied
    with _operation_helpers, with only the methods the operations call)."""
    return (rule("the engine: DeepSpeed, or a pass-through stand-in under --plain") + "\n\n"
            + "deepspeed = StandInDeepSpeed() if PLAIN else import_deepspeed()")


# The stand-in engine's methods, each with whether a plan's script calls it.
STAND_IN_METHODS = {"__init__": lambda plan: True, "__call__": lambda plan: plan.runs_forward,
                    **{method: (lambda plan, op=op: op in plan.ops_used) for method, op in
                       schema.some("ops", {"backward": "backward", "step": "step",
                                           "zero_grad": "zero_grad", "destroy": "release"}).items()}}


def _names_read(text):
    """Every name the text reads, bound there or not (a stand-in's method named like a step
    leaves the step wanted)."""
    return {n.id for n in ast.walk(ast.parse(text))
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _operation_helpers(plan, used):
    """general_steps.py's definitions that `used` (the other sections' names) call, and what they
    use, under their rule; then check(), the invariants after every operation. What tree.py and
    repro_runtime.py define is left to their own sections."""
    forms = {**(general_steps.FORMS["without_route"] if not plan.root_takes_route else {}),
             **(general_steps.FORMS["initialized_once"] if plan.initializes == 1 else {})}
    elsewhere = set(repro_runtime.definitions(tree)) | set(repro_runtime.definitions(repro_runtime))
    exclude = (repro_runtime.SCRIPT_GLOBALS | general_steps.STEP_GLOBALS
               | elsewhere - set(repro_runtime.definitions(general_steps, imported=False)))
    steps = repro_runtime.source(sorted(used & set(repro_runtime.definitions(general_steps))),
                                 general_steps, exclude, forms)
    steps = without_methods(steps, "StandInEngine",
                            [m for m, wanted in STAND_IN_METHODS.items() if wanted(plan)])
    checks = ["check_user_attrs(op_index)"]
    if plan.placement.kind != "none":
        checks.append(f"{OWNER_CHECKS[plan.placement.kind]}(op_index)")
    check = ("def check(op_index):\n"
             '    """The invariants, after the build (op_index None) and after every op."""\n'
             + "".join(f"    {c}\n" for c in checks))
    return (rule("the operations: what the replay does, one function per kind") + "\n\n" + steps
            + "\n\n\n" + check)


def _operations(plan):
    s = plan.scenario
    lines = []
    opt_name = replay_state.OPTIMIZER_CLASSES[s.optimizer]
    has_trainable = any(p.requires_grad for p in plan.built.root.parameters())
    user_optimizer = object() if has_trainable else None
    # What a correct engine would refuse: module ids (the tree keeps them alive), and optimizer
    # tokens themselves (a dropped token's id could come back for the next fresh optimizer).
    managed_modules, managed_optimizers = set(), set()
    for i, op in enumerate(s.ops):
        lines.append("")
        if op.op == "initialize":
            lines += _initialize_block(plan, i, op, opt_name, user_optimizer, managed_modules,
                                       managed_optimizers)
        elif op.op == "forward":
            lines += [f"# op {i}: forward route={op.route}", f"forward({i}, {op.route!r})"]
        elif op.op in _PLAIN_OPS:
            lines += [f"# op {i}: {op.op}", f"{op.op}({i})"]
        elif op.op in _RELEASE_OPS:
            lines += [f"# op {i}: {op.op}", f"release({i}, {op.op!r})"]
            managed_modules.clear()
            managed_optimizers.clear()
        elif op.op in _WRITE_OPS:
            lines += write_block(plan, i, op)
        else:
            lines.append(f"# op {i}: {op.op}: not replayed (sharded checkpoints are "
                         f"engine-specific)")
        lines.append(f"check({i})")
    if plan.teardown:
        lines += ["", "# teardown: drop the engines still live",
                  "if live or accepted_repeats:", "    release(None, \"teardown\")"]
    return "\n".join(lines)


def _initialize_block(plan, i, op, opt_name, user_optimizer, managed_modules, managed_optimizers):
    what = "the root" if op.target == "" else f"module {op.target!r}"
    try:
        target = plan.built.root.get_submodule(op.target)
    except Exception:
        return [comment(f"op {i}: initialize {what}: skipped, no module at this path")]
    trainable = [p for p in target.parameters() if p.requires_grad]
    if op.optimizer == "fresh" and not trainable:
        return [comment(f"op {i}: initialize {what} with a fresh optimizer: skipped, it has no "
                        f"trainable parameters")]
    optimizer = user_optimizer if op.optimizer == "same" else object()
    lines = [comment(f"op {i}: initialize {what} with " + (
        "the user's optimizer" if op.optimizer == "same"
        else f"a fresh {opt_name} over its trainable parameters"))]
    if any(id(m) in managed_modules for m in target.modules()):
        lines.append("#   a live engine already manages it or one of its modules: must be refused")
    elif optimizer is not None and optimizer in managed_optimizers:
        lines.append("#   the optimizer already belongs to a live engine: must be refused")
    else:
        managed_modules.update(id(m) for m in target.modules())
        if optimizer is not None:
            managed_optimizers.add(optimizer)
    target_source = module_expression(op.target)
    if op.optimizer == "same":
        return lines + [f"initialize({i}, {target_source}, user_optimizer)"]
    if target_source != "model":
        lines.append(f"target = {target_source}")
        target_source = "target"
    return lines + [f"initialize({i}, {target_source}, "
                    f"{optimizer_source(plan.scenario, f'trainable({target_source})')})"]


