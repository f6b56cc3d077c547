"""Strict reader of scenario files ("format": "zerocheck-scenario/1", harness/SCENARIO_FORMAT.md).

The rules are the C++ reader's: an unknown key, a wrong type, a value out of range or a broken
structural rule raises ScenarioError whose message starts with the JSON path of the culprit
(`tree[3].children[0]: ...`). A file that cannot be read or is not JSON fails at `$`.

Torch-free on purpose: bad input is refused before torch is imported. Attribute values are kept
as immutable literals (lists as tuples, tensors as TensorLiteral); values.py makes live objects.
"""

import math
import os
from dataclasses import dataclass, field

from . import config as config_reader
from .placement import Placement, read_placement
from .strict_json import (
    INT64_MAX, UINT64_MAX, ScenarioError, decode, fail, index_path, key_path, read_array,
    read_bool, read_int, read_name, read_number, read_object, read_string, shown, type_name)

FORMAT = "zerocheck-scenario/1"

MAX_WORLD_SIZE = 8
MAX_FEATURES = 64
MAX_BATCH = 16
MAX_NODES = 256
MAX_OPS = 1024
MAX_PARAM_NUMEL = 1 << 16
# Offset shapes: torch handles far more dims, but a deeper shape is never a useful test case.
MAX_OFFSET_DIMS = 16
# Attribute values nest (lists of lists); bound it so a hostile file cannot exhaust the stack.
MAX_VALUE_DEPTH = 64

# kind -> (takes children, local parameter names given the node's "bias" flag)
NODE_KINDS = {
    "Linear": (False, lambda bias: ["weight", "bias"] if bias else ["weight"]),
    "LayerNorm": (False, lambda bias: ["weight", "bias"]),
    "Tanh": (False, lambda bias: []),
    "Offset": (False, lambda bias: ["value"]),
    # An Expert's parameters are its child Linear's, named as named_parameters() names them.
    "Expert": (False, lambda bias: ["linear.weight", "linear.bias"]),
    "Sequential": (True, lambda bias: []),
    "ModuleList": (True, lambda bias: []),
    "MoE": (True, lambda bias: []),
}

# op -> (required keys, optional keys)
OP_KEYS = {
    "initialize": ((), ("optimizer", "target")),
    "forward": ((), ("route",)),
    "backward": ((), ()),
    "step": ((), ()),
    "zero_grad": ((), ()),
    "set_attr": (("module", "name", "value"), ("param",)),
    "del_attr": (("module", "name"), ("param",)),
    "release": ((), ()),
    "save": ((), ()),
    "load": ((), ()),
    "destroy": ((), ()),
}


@dataclass(frozen=True)
class TensorLiteral:
    """A float32 tensor attribute value as written in the file."""

    values: tuple
    shape: tuple


@dataclass(frozen=True)
class AttrEntry:
    name: str
    value: object  # None, bool, int, float, str, tuple (a list) or TensorLiteral


@dataclass
class Node:
    kind: str
    shape: tuple = ()
    bias: bool = True
    children: list = field(default_factory=list)
    attrs: list = field(default_factory=list)
    param_attrs: dict = field(default_factory=dict)  # local parameter name -> [AttrEntry]
    frozen: list = field(default_factory=list)

    def param_names(self):
        return NODE_KINDS[self.kind][1](self.bias)


@dataclass
class Op:
    op: str
    optimizer: str = "same"
    target: str = ""
    route: list = field(default_factory=list)
    module: str = ""
    param: str = ""
    name: str = ""
    value: object = None


@dataclass
class Scenario:
    name: str
    world_size: int
    seed: int
    features: int
    batch: int
    optimizer: str  # "adam" or "sgd"
    lr: float
    config: dict  # effective DeepSpeed config, defaults filled in, no "zerocheck" section
    tree: list
    placement: Placement
    ops: list
    source: str = ""


def load_scenario(path):
    """Returns the scenario in the file at `path`, named after the file. Raises ScenarioError."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail("$", f"cannot read {path}: {e.strerror or e}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        fail("$", f"file is not valid UTF-8 (byte {e.start})")
    name = os.path.basename(path)
    if name.endswith(".json"):
        name = name[: -len(".json")]
    scenario = parse_scenario(text, name)
    scenario.source = str(path)
    return scenario


def parse_scenario(text, name="scenario"):
    """Returns the scenario in JSON `text`. Raises ScenarioError naming the JSON path."""
    return scenario_from_json(decode(text), name)


def scenario_from_json(doc, name="scenario"):
    """Returns the scenario in a decoded JSON document. Raises ScenarioError naming the path."""
    read_object(doc, "$",
                required=("format", "world_size", "seed", "features", "batch", "optimizer",
                          "config", "tree", "ops"),
                optional=("placement",))
    if read_string(doc["format"], "format") != FORMAT:
        fail("format", f"expected {FORMAT!r}, got {shown(doc['format'])}")
    world_size = read_int(doc["world_size"], "world_size", 1, MAX_WORLD_SIZE)
    seed = read_int(doc["seed"], "seed", 0, UINT64_MAX)
    features = read_int(doc["features"], "features", 1, MAX_FEATURES)
    batch = read_int(doc["batch"], "batch", 1, MAX_BATCH)

    read_object(doc["optimizer"], "optimizer", required=("kind", "lr"))
    kind = read_string(doc["optimizer"]["kind"], "optimizer.kind")
    if kind not in ("adam", "sgd"):
        fail("optimizer.kind", f"expected \"adam\" or \"sgd\", got {shown(kind)}")
    lr = read_number(doc["optimizer"]["lr"], "optimizer.lr")
    if lr <= 0:
        fail("optimizer.lr", f"learning rate must be > 0, got {lr}")

    config, config_placement = config_reader.read_config(doc["config"], "config", world_size)
    tree = _read_tree(doc["tree"])
    placement = read_placement(doc.get("placement", {"kind": "none"}), "placement", world_size)
    # The config's "zerocheck.placement" is the same setting: a scenario gives its policy once
    # (the C++ reader, harness/scenario.cc, applies the same rule).
    if config_placement.kind != "none":
        if placement.kind != "none":
            fail("placement", "a policy is also given in config.zerocheck.placement; give it once")
        placement = config_placement
    ops = _read_ops(doc["ops"])
    return Scenario(name=name, world_size=world_size, seed=seed, features=features, batch=batch,
                    optimizer=kind, lr=float(lr), config=config, tree=tree, placement=placement,
                    ops=ops)


def _read_tree(value):
    read_array(value, "tree", 1, MAX_NODES)
    nodes = [_read_node(raw, index_path("tree", i)) for i, raw in enumerate(value)]
    for i, node in enumerate(nodes):
        path = index_path("tree", i)
        for j, child in enumerate(node.children):
            child_path = index_path(key_path(path, "children"), j)
            if child <= i:
                fail(child_path,
                     f"child index {child} must be greater than the node's own index {i}")
            if child >= len(nodes):
                fail(child_path, f"child index {child} is past the last node ({len(nodes) - 1})")
    return nodes


def _read_node(raw, path):
    if not isinstance(raw, dict) or "kind" not in raw:
        read_object(raw, path, required=("kind",), optional=("children", "attrs", "param_attrs",
                                                             "frozen", "shape", "bias"))
    kind = read_string(raw["kind"], key_path(path, "kind"))
    if kind not in NODE_KINDS:
        fail(key_path(path, "kind"),
             f"unknown node kind {shown(kind)} (expected one of: {', '.join(NODE_KINDS)})")
    optional = ["children", "attrs", "param_attrs", "frozen"]
    optional += {"Offset": ["shape"], "Linear": ["bias"]}.get(kind, [])
    read_object(raw, path, required=("kind",), optional=optional)

    node = Node(kind=kind)
    if "bias" in raw:
        node.bias = read_bool(raw["bias"], key_path(path, "bias"))
    if "shape" in raw:
        node.shape = _read_offset_shape(raw["shape"], key_path(path, "shape"))
    if "children" in raw:
        children_path = key_path(path, "children")
        read_array(raw["children"], children_path, 0, MAX_NODES)
        node.children = [read_int(c, index_path(children_path, j))
                         for j, c in enumerate(raw["children"])]
        if node.children and not NODE_KINDS[kind][0]:
            fail(children_path, f"a {kind} node takes no children")
    if kind == "MoE" and not node.children:
        fail(key_path(path, "children"), "an MoE node needs at least one expert")
    if "attrs" in raw:
        node.attrs = _read_attr_list(raw["attrs"], key_path(path, "attrs"))

    names = node.param_names()
    described = ", ".join(names) or "none"
    if "param_attrs" in raw:
        pa_path = key_path(path, "param_attrs")
        read_object(raw["param_attrs"], pa_path, optional=names)
        node.param_attrs = {p: _read_attr_list(v, key_path(pa_path, p))
                            for p, v in raw["param_attrs"].items()}
    if "frozen" in raw:
        frozen_path = key_path(path, "frozen")
        read_array(raw["frozen"], frozen_path)
        for j, p in enumerate(raw["frozen"]):
            read_string(p, index_path(frozen_path, j))
            if p not in names:
                fail(index_path(frozen_path, j),
                     f"a {kind} node has no parameter {shown(p)} (parameters: {described})")
        node.frozen = list(raw["frozen"])
    return node


def _read_offset_shape(value, path):
    read_array(value, path, 0, MAX_OFFSET_DIMS)
    dims = tuple(read_int(d, index_path(path, j), 0, MAX_PARAM_NUMEL) for j, d in enumerate(value))
    numel = math.prod(dims)
    if numel > MAX_PARAM_NUMEL:
        fail(path, f"shape {list(dims)} has {numel} elements; the limit is {MAX_PARAM_NUMEL}")
    return dims


def _read_attr_list(value, path):
    read_array(value, path)
    entries = []
    for j, raw in enumerate(value):
        entry_path = index_path(path, j)
        read_object(raw, entry_path, required=("name", "value"))
        name = read_name(raw["name"], key_path(entry_path, "name"))
        entries.append(AttrEntry(name, read_value(raw["value"], key_path(entry_path, "value"))))
    return entries


def read_value(value, path, depth=0):
    """Returns the attribute value at `path` as an immutable literal."""
    if depth > MAX_VALUE_DEPTH:
        fail(path, f"value nested deeper than {MAX_VALUE_DEPTH} levels")
    if value is None or type(value) in (bool, str):
        return value
    if type(value) is int:
        return read_int(value, path)
    if type(value) is float:
        return read_number(value, path)
    if isinstance(value, list):
        return tuple(read_value(v, index_path(path, j), depth + 1) for j, v in enumerate(value))
    if isinstance(value, dict):
        return _read_tensor(value, path)
    fail(path, f"expected an attribute value, got {type_name(value)}")


def _read_tensor(value, path):
    read_object(value, path, required=("tensor", "shape"))
    numbers_path, shape_path = key_path(path, "tensor"), key_path(path, "shape")
    read_array(value["tensor"], numbers_path)
    numbers = tuple(float(read_number(v, index_path(numbers_path, j)))
                    for j, v in enumerate(value["tensor"]))
    read_array(value["shape"], shape_path)
    shape = tuple(read_int(d, index_path(shape_path, j), 0, INT64_MAX)
                  for j, d in enumerate(value["shape"]))
    if math.prod(shape) != len(numbers):
        fail(path, f"tensor has {len(numbers)} numbers but shape {list(shape)} needs "
                   f"{math.prod(shape)}")
    return TensorLiteral(numbers, shape)


def _read_ops(value):
    read_array(value, "ops", 0, MAX_OPS)
    return [_read_op(raw, index_path("ops", i)) for i, raw in enumerate(value)]


def _read_op(raw, path):
    if not isinstance(raw, dict) or "op" not in raw:
        read_object(raw, path, required=("op",))
    name = read_string(raw["op"], key_path(path, "op"))
    if name not in OP_KEYS:
        fail(key_path(path, "op"),
             f"unknown op {shown(name)} (expected one of: {', '.join(OP_KEYS)})")
    required, optional = OP_KEYS[name]
    read_object(raw, path, required=("op",) + required, optional=optional)
    op = Op(op=name)
    if "optimizer" in raw:
        op.optimizer = read_string(raw["optimizer"], key_path(path, "optimizer"))
        if op.optimizer not in ("same", "fresh"):
            fail(key_path(path, "optimizer"),
                 f"expected \"same\" or \"fresh\", got {shown(op.optimizer)}")
    if "target" in raw:
        op.target = read_string(raw["target"], key_path(path, "target"))
    if "route" in raw:
        route_path = key_path(path, "route")
        read_array(raw["route"], route_path)
        op.route = [read_int(c, index_path(route_path, j)) for j, c in enumerate(raw["route"])]
    if "module" in raw:
        op.module = read_string(raw["module"], key_path(path, "module"))
    if "param" in raw:
        op.param = read_string(raw["param"], key_path(path, "param"))
    if "name" in raw:
        op.name = read_name(raw["name"], key_path(path, "name"))
    if "value" in raw:
        op.value = read_value(raw["value"], key_path(path, "value"))
    return op


__all__ = ["FORMAT", "NODE_KINDS", "AttrEntry", "Node", "Op", "Placement", "Scenario",
           "ScenarioError", "TensorLiteral", "load_scenario", "parse_scenario",
           "scenario_from_json"]
