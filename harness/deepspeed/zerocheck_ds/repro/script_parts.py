"""What the repro script writers share (repro_script.py's general form, repro_straight.py's
straight-line form, repro_twin.py's dense-twin form): the plan's values and names as Python
source, the script's header, the tree built node by node, the user's writes, the optimizer, the
copied definitions (repro_runtime.source) and the verdict; which names a text uses and dropping
what it does not. Each returns script text; none runs anything.
"""

import ast
import io
import re
import tokenize
import textwrap

import torch

from ..findings.signatures import INVALID_CONFIG
from ..oracles.ledger import ObjectKey
from ..replay import state as replay_state
from ..scenario import schema
from ..scenario.scenario import TensorLiteral
from . import repro_runtime


TWIN_INVARIANTS = schema.some("invariants", "I3", "I6")


REFUSAL_TEXT = "already been initialized"


# What each target invariant means to someone who has never heard of zerocheck.
INVARIANT_MEANING = {**schema.some("invariants", {
    "I1": "an attribute the user set (or deleted) on a module or parameter no longer holds the "
          "user's last write",
    "I2": "a module's owner rank, computed by the placement policy from the attributes the user "
          "set, differs when computed from the live module",
    "I5": f"a repeated initialize of a managed model, submodule or optimizer is not refused with "
          f"an error saying {REFUSAL_TEXT!r}, changes the model, or breaks training",
    "I3": "training through the engine does not give what a dense twin gives: one copy of the "
          "model trained on every rank's micro-batch, each rank's gradient reduced in the "
          "engine's own order, bit for bit",
    "I6": "right after a load, a parameter is not what the dense twin holds after the same load "
          "(the values of the save the load names)",
}),
    "op": "an operation raises",
    # I5 at an initialize given an invalid config (the target's attribute INVALID_CONFIG).
    "I5 invalid config": "an initialize given an invalid config is not refused as a configuration "
                         "error, changes the model or optimizers, or breaks training",
    "crash": "the process dies",
    "hang": "the process hangs",
}


def names_used(text):
    """Every name the script text reads or calls and does not bind itself (attributes, local
    variables and parameters excepted): what must come from elsewhere."""
    tree_ = ast.parse(text)
    loaded, bound = set(), set()
    for node in ast.walk(tree_):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
    return loaded - bound


def without_methods(text, class_name, keep):
    """`text` with the methods of its class `class_name` that are not in `keep` removed (a
    script's copy of a class holds only the methods the script calls); as it was where the text
    defines no such class."""
    drop = set()
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for method in node.body:
                if isinstance(method, ast.FunctionDef) and method.name not in keep:
                    drop.update(range(method.lineno - 1, method.end_lineno))
    lines = [line for i, line in enumerate(text.split("\n")) if i not in drop]
    return re.sub(r"\n\n\n+(    def )", r"\n\n\1", "\n".join(lines))


def without_unused(sections):
    """The sections as one text without the top-level definitions and assignments nothing else
    reads (generic state and helpers this scenario does not need), until none is left."""
    text = "\n\n\n".join(part.strip("\n") for part in sections if part)
    while True:
        module = ast.parse(text)
        unused = []
        for node in module.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names = {node.name}
            elif isinstance(node, ast.Assign) and all(isinstance(t, (ast.Name, ast.Tuple))
                                                      for t in node.targets):
                names = {n.id for t in node.targets for n in ast.walk(t)
                         if isinstance(n, ast.Name)}
            else:
                continue
            inside = {id(n) for n in ast.walk(node)}
            if not any(isinstance(n, ast.Name) and n.id in names and id(n) not in inside
                       and isinstance(n.ctx, ast.Load) for n in ast.walk(module)):
                unused.append(node)
        if not unused:
            return [text]
        drop = {i for node in unused for i in range(node.lineno - 1, node.end_lineno)}
        lines = [line for i, line in enumerate(text.split("\n")) if i not in drop]
        text = re.sub(r"\n{4,}", "\n\n\n", "\n".join(lines))


def copied_section(title, module, used, forms=None, note=""):
    """The definitions of `module` that `used` names, and what they need, under a rule and a
    comment `note`; or "". `forms`: general name -> the simpler form copied under it."""
    wanted = sorted(used & set(repro_runtime.definitions(module)))
    return (rule(title) + "\n\n" + note + repro_runtime.source(
        wanted, module, repro_runtime.SCRIPT_GLOBALS, forms) if wanted else "")


def _value_source(literal):
    """Python source building a fresh live object equal to a scenario literal (values.to_live)."""
    if isinstance(literal, TensorLiteral):
        return (f"torch.tensor({list(literal.values)!r}, dtype=torch.float32)"
                f".reshape({list(literal.shape)!r})")
    if isinstance(literal, tuple):
        return "[" + ", ".join(_value_source(v) for v in literal) + "]"
    return repr(literal)  # None, bool, int, finite float, str (repr escapes what cannot print)


def _printable(text):
    # Names and signatures may hold newlines or other unprintable characters: escape them.
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def comment(text):
    """`text` as comment lines."""
    return "\n".join(textwrap.wrap(_printable(text), width=96, initial_indent="# ",
                                    subsequent_indent="#   ", break_long_words=False,
                                    break_on_hyphens=False))


def _docstring_safe(text):
    """`text` as it may stand inside a triple-quoted docstring."""
    return _printable(text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"'))


def module_expression(path):
    return "model" if path == "" else f"model.get_submodule({path!r})"


def _object_source(module_path, param):
    if not param:
        return module_expression(module_path)
    return f"model.get_parameter({'.'.join(p for p in (module_path, param) if p)!r})"


def _key_source(key):
    return f"{key.module!r}, {key.param!r}"


def fitted(call):
    """A call in lines of at most 100 columns where its arguments allow: each line ends at an
    argument's comma, the next under the first argument."""
    opening, commas = call.index("(") + 1, _argument_commas(call)
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


def _argument_commas(call):
    """The offsets of the commas between a one-line call's own arguments: those at bracket depth
    1, found by Python's tokenizer so that none inside a string literal counts (a signature may
    hold ", ")."""
    if "\n" in call:
        return []
    depth, commas = 0, []
    for token in tokenize.generate_tokens(io.StringIO(call).readline):
        if token.type != tokenize.OP:
            continue
        depth += (token.string in "([{") - (token.string in ")]}")
        if token.string == "," and depth == 1:
            commas.append(token.start[1])
    return commas


def rule(title):
    return f"# ---- {title} ".ljust(96, "-")


def _paragraph(text):
    return textwrap.fill(text, width=96, break_long_words=False, break_on_hyphens=False)


# What a script may import, as its import line; each only where the script uses the name.
_IMPORTS = {"copy": "import copy", "math": "import math", "os": "import os", "re": "import re",
            "socket": "import socket", "struct": "import struct", "sys": "import sys"}


_TORCH_IMPORTS = {"F": "import torch.nn.functional as F", "nn": "from torch import nn"}


def header_section(plan, target, script_name, body, stage, produced_on):
    """The script's docstring and imports, for the script text `body` that follows them."""
    s, invariant, name = plan.scenario, target["invariant"], _docstring_safe(script_name)
    used = names_used(body)
    defined = {node.name for node in ast.parse(body).body if isinstance(node, ast.FunctionDef)}
    seen = ("build time or teardown" if target.get("op_index") is None
            else f"op {target['op_index']} ({target.get('op') or '?'})")
    details = [f"{k} {target[k]!r}" for k in ("module_path", "param", "attribute",
                                               "exception_type") if target.get(k) not in (None, "")]
    meaning = INVARIANT_MEANING[f"I5 {INVALID_CONFIG}" if invariant == "I5" and
                                target.get("attribute") == INVALID_CONFIG else invariant]
    what = (f"What fails ({invariant}): {meaning}; first seen at {seen}"
            + (": " + ", ".join(details) if details else "") + ".")
    origin = (f"Generated by zerocheck from scenario {s.name!r} ({s.world_size} rank(s), "
              f"{len(s.ops)} operations, ZeRO stage {stage}), on "
              f"{produced_on or 'an unrecorded DeepSpeed'} with torch {torch.__version__}. "
              f"Needs torch, and deepspeed unless --plain.")
    if s.world_size == 1:
        run = f"    python3 {name}"
    else:
        run = "\n".join(
            f"    RANK={r} WORLD_SIZE={s.world_size} LOCAL_RANK={r} MASTER_ADDR=127.0.0.1 "
            f"MASTER_PORT=29500 python3 {name}" + (" &" if r < s.world_size - 1 else "")
            for r in range(s.world_size))
        run += f"\n(`python3 {name}` runs it on one rank; placement still assumes {s.world_size}.)"
    if invariant in ("crash", "hang"):
        dies = "dying" if invariant == "crash" else "hanging"
        outcome = (f"The reproduction is the process {dies}; a run that reaches the end prints "
                   "NOT REPRODUCED and exits 0.")
        if invariant == "hang":
            outcome += " Run it under `timeout 600` to bound it."
    else:
        outcome = ("Prints `REPRODUCED <signature>: expected ..., got ...` and exits 1 when the "
                   "failure shows, `NOT REPRODUCED <signature>` and exits 0 otherwise.")
    # Only the checks the script holds: a straight script runs its target's check alone.
    held = [clause for names, clause in (
        (("check_user_attrs",), "after every operation, I1: every attribute the user wrote "
                                "still holds the user's value"),
        (("check_owner_by_attr", "check_owner_by_map"), "after every operation, I2: placement "
                                                         "owners agree"),
        (("repeat_initialize",), f"at every repeated initialize, I5: it raises an error saying "
                                 f"{REFUSAL_TEXT!r}, changes nothing, and a forward still runs"),
        (("invalid_initialize",), "at an initialize given an invalid config, I5: it raises a "
                                  "configuration error, changes nothing, and a forward still runs"))
        if any(n in defined for n in names)]
    checks = ("Every failure on the way is printed as FAILED, and the run goes on. "
              + (f"Checked {'; '.join(held)}." if held
                 else "No invariant is checked on the way: the finding is the operations' own "
                      "outcome."))
    control = ("a pass-through engine that refuses a repeated initialize"
               if "repeat_initialize" in defined or "invalid_initialize" not in defined
               else "no engine: the initialize given an invalid config is refused, as a correct "
                    "engine refuses it")
    if invariant in TWIN_INVARIANTS:
        checks = ("Every failure on the way is printed as FAILED, and the run goes on. Checked "
                  "against the dense twin: after a forward this rank's loss, after the initialize "
                  "and every step each parameter gathered whole from the ranks (I3), and so "
                  "after a load (I6).")
        control = "its data parallelism over the same ranks, against a twin by its rules"
    doc = "\n\n".join([
        _paragraph(_docstring_safe(f"Reproduces: {target['signature']}")),
        _paragraph(_docstring_safe(what)), _paragraph(_docstring_safe(origin)),
        ("Run:\n" if s.world_size == 1 else "Run, one process per rank:\n") + run,
        _paragraph(f"Control, plain PyTorch ({control}); it must NOT reproduce:")
        + f"\n    python3 {name} --plain",
        _paragraph(outcome + " " + checks)])
    imports = [line for name, line in _IMPORTS.items() if name in used]
    imports += ["", "import torch"] + [line for name, line in _TORCH_IMPORTS.items() if name in used]
    return f'''#!/usr/bin/env python3
"""{doc}
"""

''' + "\n".join(imports)


# The I2 check of each placement kind, in repro_runtime.
OWNER_CHECKS = schema.some("placement_kinds", {"attr_mod": "check_owner_by_attr",
                                                "map": "check_owner_by_map"})


def _tree_class(plan, node):
    """The name of tree.py's class a node is built with, or None where one of torch's does the
    same job here."""
    if node.kind == "Sequential" and plan.torch_sequential:
        return None  # no route to hand on: torch's runs the same
    if not plan.runs_forward and node.kind != "Offset":
        # No forward runs through it: torch's containers (a ModuleDict for an Expert or MoE)
        # hold the same modules and parameters under the same names.
        return None
    return schema.every("node_kinds", {
        "Linear": None, "LayerNorm": None, "Tanh": None, "Offset": "OffsetNode",
        "Expert": "ExpertNode", "Sequential": "SequentialNode", "ModuleList": "ModuleListNode",
        "MoE": "MoENode",
    })[node.kind]


def _constructor(plan, node, nn):
    """The source building `node`, torch's modules named through `nn` ("nn" or "torch.nn")."""
    features, cls = plan.features, _tree_class(plan, node)
    children = "[" + ", ".join(f"n{c}" for c in node.children) + "]"
    if node.kind == "Offset":
        return f"{cls}({tuple(node.shape)!r})"
    if cls is not None:
        return f"{cls}({features if node.kind == 'Expert' else children})"
    return schema.every("node_kinds", {
        "Linear": f"{nn}.Linear({features}, {features}" + ("" if node.bias else ", bias=False")
                  + ")",
        "LayerNorm": f"{nn}.LayerNorm({features})",
        "Tanh": f"{nn}.Tanh()",
        "Offset": None,
        "Expert": f"{nn}.ModuleDict({{'linear': {nn}.Linear({features}, {features})}})",
        "Sequential": f"{nn}.Sequential({children[1:-1]})",
        "ModuleList": f"{nn}.ModuleList({children})",
        "MoE": f"{nn}.ModuleDict({{'experts': {nn}.ModuleList({children})}})",
    })[node.kind]


def build_section(plan, checks=("check",), placement=True):
    """The scenario's model and the user's attributes and optimizer; with `placement`, what the
    I2 checks read; then `checks` after the build."""
    s, built = plan.scenario, plan.built
    lines = [rule("the scenario"), "",
             "# The model, one variable per node; a node listed twice is one shared (tied) module."]
    # torch.nn spelled out, unless tree.py's classes (which say nn) come with the script.
    nn = "nn" if any(_tree_class(plan, s.tree[i]) for i in built.nodes) else "torch.nn"
    for index in sorted(built.nodes, reverse=True):  # children have larger indices
        node = s.tree[index]
        lines.append(f"{'model = ' if index == 0 else ''}n{index} = "
                     f"{_constructor(plan, node, nn)}")
        lines += [f"n{index}.{name}.requires_grad_(False)" for name in node.frozen]
    lines += [comment(f"tree[{i}] is not built: no parent lists it") for i in built.unreachable]
    if plan.runs_forward:
        lines.append("fill_parameters(model, SEED)  # the seeded values of each parameter's path")
    lines += ["",
              "# The user's attributes, and what the user expects to read back: user_attrs[module "
              "path,", "# parameter name or \"\", attribute name]."]
    writes = []  # (setattr source, user_attrs key, the value's source, the value)
    for index in sorted(built.nodes):
        node, module = s.tree[index], built.nodes[index]
        owners = [("", module, ObjectKey(built.path_of(module), ""), node.attrs)]
        for pname, entries in node.param_attrs.items():
            param = module.get_parameter(pname)
            owners.append((pname, param, ObjectKey(*built.param_key(param)), entries))
        for pname, obj, key, entries in owners:
            obj_source = f"n{index}" + (f".{pname}" if pname else "")
            for entry in entries:
                write = f"setattr({obj_source}, {entry.name!r}, {_value_source(entry.value)})"
                reason = plan.skip_reason(obj, key, entry.name)
                if reason:
                    lines.append(comment(f"skipped {write}: {reason}"))
                    continue
                writes.append((write, (key.module, key.param, entry.name),
                               _value_source(entry.value), entry.value))
    lines += [write for write, _, _, _ in writes]
    if any(isinstance(value, (TensorLiteral, tuple)) for _, _, _, value in writes):
        # A fresh object each: the user's own tensor or list may be changed in place.
        lines += ["user_attrs = {}"] + [f"user_attrs[{key!r}] = {source}"
                                        for _, key, source, _ in writes]
    else:
        lines.append(_dict_source({key: source for _, key, source, _ in writes}, "user_attrs"))
    optimizer = user_optimizer_source(plan)
    lines.append(f"user_optimizer = {optimizer}" + ("  # the model has no trainable parameters"
                                                    if optimizer == "None" else ""))
    lines += _placement_setup(plan) if placement else []
    return "\n".join(lines + ([""] + [f"{check}(None)" for check in checks] if checks else []))


def user_optimizer_source(plan):
    """The source of the user's optimizer over the model's trainable parameters, or "None"."""
    params = [p.requires_grad for p in plan.built.root.parameters()]
    if not any(params):
        return "None"
    return optimizer_source(plan.scenario, "model.parameters()" if all(params) and plan.initializes
                            else "trainable(model)")


def optimizer_source(scenario, params_source):
    """Returns the source of the scenario's optimizer over `params_source`, as the replay builds it."""
    arguments = replay_state.optimizer_arguments(scenario.optimizer, scenario.lr)
    return (f"torch.optim.{replay_state.OPTIMIZER_CLASSES[scenario.optimizer]}({params_source}, "
            + ", ".join(f"{k}={v!r}" for k, v in arguments.items()) + ")")


def _placement_setup(plan):
    policy, built = plan.placement, plan.built
    if policy.kind == "attr_mod":
        placed = _dict_source({path: plan.module_source(path) for path in built.expert_paths},
                              "placed")
        if plan.placement_world_size:  # the settings have no SCENARIO_WORLD_SIZE
            return ["", f"# I2: each expert's owner rank is its {policy.attr!r} mod the "
                        f"scenario's world size.",
                    f"PLACEMENT_ATTR, SCENARIO_WORLD_SIZE = {policy.attr!r}, "
                    f"{plan.scenario.world_size}", placed]
        return ["", f"# I2: each expert's owner rank is its {policy.attr!r} mod "
                    f"SCENARIO_WORLD_SIZE.", f"PLACEMENT_ATTR = {policy.attr!r}", placed]
    if policy.kind == "map":
        lines = ["", "# I2: the placement map, and the module the user placed at each path."]
        entries = []
        for path, rank in policy.owners.items():
            try:
                entries.append((path, rank, plan.module_source(path)))
            except AttributeError:  # get_submodule's answer for a missing path
                lines.append(comment(f"skipped placement.owners[{path!r}]: no module at path "
                                     f"{path!r}"))
        lines.append("OWNERS = {" + ", ".join(f"{p!r}: {r}" for p, r, _ in entries) + "}")
        return lines + [_dict_source({p: v for p, _, v in entries}, "placed")]
    return []


def _dict_source(sources, name):
    """`name = {key: source, ...}` on one line where it fits in 100 columns, else one a line."""
    items = [f"{key!r}: {source}" for key, source in sources.items()]
    line = f"{name} = {{" + ", ".join(items) + "}"
    return line if len(line) <= 100 else "\n".join([f"{name} = {{"] + [f"    {i}," for i in items]
                                                     + ["}"])


def write_block(plan, i, op):
    where = ObjectKey(op.module, op.param).describe()
    reason, key = plan.write_skip_reason(op.module, op.param, op.name)
    if reason:
        return [comment(f"op {i}: {op.op} {op.name!r} on {where}: skipped, {reason}")]
    obj = _object_source(op.module, op.param)
    user_key = f"user_attrs[{_key_source(key)}, {op.name!r}]"
    if op.op == "set_attr":
        return [comment(f"op {i}: set_attr {op.name!r} on {where}"), "try:",
                f"    setattr({obj}, {op.name!r}, {_value_source(op.value)})",
                f"    {user_key} = {_value_source(op.value)}",
                "except ERRORS as e:", f"    write_failed({i}, {op.name!r}, e)"]
    return [comment(f"op {i}: del_attr {op.name!r} on {where}"), "try:",
            f"    delattr({obj}, {op.name!r})", f"    {user_key} = ABSENT",
            "except AttributeError:", f"    skipped({i}, \"nothing to delete\")",
            "except ERRORS as e:", f"    write_failed({i}, {op.name!r}, e)"]


def verdict_section(target):
    """The verdict: repro_runtime.verdict over the failures seen, or for a crash or hang a line
    saying every step finished."""
    invariant = target["invariant"]
    if invariant in ("crash", "hang"):
        return (rule("verdict") + "\n\n"
                f"# The target is a {invariant}: reaching this line means every step finished.\n"
                + fitted(f"verdict({target['signature']!r}, {invariant!r})"))
    arguments = [repr(target["signature"]), repr(invariant)]
    if target.get("attribute") is not None:
        arguments.append(f"attribute={target['attribute']!r}")
    if invariant == "op" and target.get("exception_type"):
        arguments.append(f"actual={target['exception_type']!r}")
    if invariant == "I5" and target.get("i5_expected"):  # accepted / wrong error / changed
        arguments.append(f"expected_start={target['i5_expected']!r}")
    return rule("verdict") + "\n\n" + fitted(f"verdict({', '.join(arguments)})")
