"""Strict reader of scenario files ("format": "zerocheck-scenario/2", /1 still read; harness/SCENARIO_FORMAT.md).

The rules, paths and messages are the C++ reader's (harness/scenario/read.cc, validate.cc): an unknown key, a wrong
type, a value out of range or a broken structural rule raises ScenarioError "<JSON path>:
<message>" (`$.tree[3].children[0]: ...`); the shared fixtures in
harness/tests/scenarios/malformed/ hold both readers to the same line. Kinds, operations, keys
and limits come from schema.json (schema.py), never from a list of this file.

Torch-free on purpose: bad input is refused before torch is imported. Attribute values are kept
as immutable literals (lists as tuples, tensors as TensorLiteral); values.py makes live objects.
"""

import math
import os
import struct
from dataclasses import dataclass, field

from . import config as config_reader
from . import schema
from .parameter_names import parameter_names
from .placement import Placement, read_placement
from .strict_json import (
    INT64_MIN, UINT64_MAX, ScenarioError, decode, fail, index_path, key_path, quoted, read_array,
    read_bool, read_checked, read_enum, read_int, read_limited, read_name, read_number, read_object,
    read_string, type_name)

FORMAT = schema.FORMAT
READ_FORMATS = schema.READ_FORMATS

# The largest finite float32: a tensor number beyond it does not fit (the C++ reader's FLT_MAX).
_FLOAT32_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]


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
        return schema.parameter_names(self.kind, self.bias)


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
    world_size: int = 0  # load: a second world of this many ranks loads it too (0: none)
    tag: object = None  # save/load: the checkpoint's tag (None: save's default, load's last save)
    optimizer_states: bool = True  # load: the optimizer's state too
    module_only: bool = False  # load: the module's parameters only
    modifier_rank: object = None  # gather: the rank whose edit every rank gets (None: no rank)
    scale: float = 1.0  # gather: the in-place edit, parameters *= scale
    config_error: object = None  # initialize: a name of schema.CONFIG_ERRORS (None: valid config)
    rank: int = 0  # inject: the one rank whose data gets the value
    into: str = ""  # inject: one of INJECT_INTO


@dataclass
class Scenario:
    name: str
    world_size: int
    seed: int
    features: int
    batch: int
    optimizer: str  # a kind of schema.OPTIMIZERS
    lr: float
    config: dict  # effective DeepSpeed config, defaults filled in, no "zerocheck" section
    tree: list
    placement: Placement
    ops: list
    construct: str = "eager"  # one of schema.CONSTRUCTIONS
    source: str = ""
    # zerocheck's own overflow skip for its engine (harness/SCENARIO_FORMAT.md); DeepSpeed's
    # ZeRO-3 has no such key outside fp16, so the DeepSpeed replay reads it and ignores it.
    overflow_protection: object = None


def load_scenario(path):
    """Returns the scenario in the file at `path`, named after the file. Raises ScenarioError."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail("$", f"cannot read {path}: {e.strerror or e}")
    name = os.path.basename(path)
    if name.endswith(".json"):
        name = name[: -len(".json")]
    scenario = scenario_from_json(decode(data), name)
    scenario.source = str(path)
    return scenario


def parse_scenario(text, name="scenario"):
    """Returns the scenario in JSON `text` (str or UTF-8 bytes). Raises ScenarioError."""
    return scenario_from_json(decode(text), name)


def scenario_from_json(doc, name="scenario"):
    """Returns the scenario in a decoded JSON document. Raises ScenarioError naming the path.

    Duplicate keys are decode()'s to refuse: a dict has none left to see.
    """
    read_object(doc, "$", schema.TOP_REQUIRED, schema.TOP_OPTIONAL)
    read_enum(doc["format"], "$.format", READ_FORMATS)
    world_size = read_limited(doc["world_size"], "$.world_size", "world_size")
    seed = read_limited(doc["seed"], "$.seed", "seed")
    features = read_limited(doc["features"], "$.features", "features")
    batch = read_limited(doc["batch"], "$.batch", "batch")
    kind, lr = _read_optimizer(doc["optimizer"], "$.optimizer")
    config, config_placement = config_reader.read_config(doc["config"], "$.config", world_size)
    construct = "eager"
    if "construct" in doc:
        construct = read_enum(doc["construct"], "$.construct", schema.CONSTRUCTIONS)
    tree = _read_tree(doc["tree"], "$.tree")
    placement = Placement()
    if "placement" in doc:
        placement = read_placement(doc["placement"], "$.placement", world_size)
    # The config's "zerocheck.placement" is the same setting: a scenario gives a policy once.
    if config_placement.kind != "none":
        if placement.kind != "none":
            fail("$.placement", "a policy is also given in $.config.zerocheck.placement; "
                                "give it once")
        placement = config_placement
    ops = _read_ops(doc["ops"], "$.ops")
    names = None  # the tree's parameter names, made when an inject needs them
    for i, op in enumerate(ops):
        # A modifier rank (an injection's rank) is one of this world's ranks (the reader bounds
        # it by the widest world).
        for key, rank in (("modifier_rank", op.modifier_rank),
                          ("rank", op.rank if op.op == "inject" else None)):
            if rank is not None and rank >= world_size:
                fail(key_path(index_path("$.ops", i), key),
                     f"value {rank} is out of range [0, {world_size - 1}]")
        if op.op == "inject":
            names = names if names is not None else parameter_names(tree)
            _check_injection(op, index_path("$.ops", i), names)
    return Scenario(name=name, world_size=world_size, seed=seed, features=features, batch=batch,
                    optimizer=kind, lr=float(lr), config=config, tree=tree, placement=placement,
                    ops=ops, construct=construct,
                    overflow_protection=doc.get("overflow_protection"))


def _check_injection(op, path, names):
    """`param` names a parameter of the tree exactly when the injection goes into a gradient."""
    param_path = key_path(path, "param")
    if op.into == "gradient" and not op.param:
        fail(param_path, 'missing required key (an inject "into": "gradient" names its parameter)')
    if op.into != "gradient" and op.param:
        fail(param_path, f'an inject "into": {quoted(op.into)} takes no parameter')
    if op.param and op.param not in names:
        fail(param_path, f"the tree has no parameter {quoted(op.param)} "
                         f"(parameters: {', '.join(names) or 'none'})")


def _read_optimizer(value, path):
    read_object(value, path, required=("kind", "lr"))
    kind = read_enum(value["kind"], key_path(path, "kind"), tuple(schema.OPTIMIZERS))
    lr_path = key_path(path, "lr")
    lr = read_number(value["lr"], lr_path)
    if not schema.LR_ABOVE < lr < schema.LR_BELOW:
        fail(lr_path, f"expected a learning rate in ({schema.LR_ABOVE:g}, {schema.LR_BELOW:g})")
    return kind, lr


def _read_tree(value, path):
    read_array(value, path, "nodes")
    nodes = [_read_node(raw, index_path(path, i)) for i, raw in enumerate(value)]
    for i, node in enumerate(nodes):
        children_path = key_path(index_path(path, i), "children")
        for j, child in enumerate(node.children):
            if not i < child < len(nodes):
                fail(index_path(children_path, j),
                     f"child index {child} must be greater than {i} and less than {len(nodes)}")
    return nodes


def _read_node(raw, path):
    _require(raw, path, "kind")  # the kind says which keys the node may have
    kind = read_enum(raw["kind"], key_path(path, "kind"), tuple(schema.NODE_KINDS))
    row = schema.NODE_KINDS[kind]
    read_object(raw, path, required=schema.NODE_REQUIRED, optional=schema.NODE_OPTIONAL + row.keys)

    node = Node(kind=kind)
    if "bias" in raw:
        node.bias = read_bool(raw["bias"], key_path(path, "bias"))
    if "shape" in raw:
        node.shape = _read_offset_shape(raw["shape"], key_path(path, "shape"))
    children_path = key_path(path, "children")
    if "children" in raw:
        read_array(raw["children"], children_path)
        # A child may be listed twice (tied), but never more entries than a tree has nodes.
        if len(raw["children"]) > schema.LIMITS["nodes"][1]:
            fail(children_path, f"has {len(raw['children'])} items, expected at most {schema.LIMITS['nodes'][1]}")
        # Any integer: the range is the child rule's (_read_tree), with its own message.
        node.children = [read_int(c, index_path(children_path, j), INT64_MIN, UINT64_MAX)
                         for j, c in enumerate(raw["children"])]
    if row.children == "none" and node.children:
        fail(children_path, f"a node of kind {kind} takes no children")
    if row.children == "at_least_one" and not node.children:
        fail(children_path, f"a node of kind {kind} needs at least one child")
    if "attrs" in raw:
        node.attrs = _read_attr_list(raw["attrs"], key_path(path, "attrs"))

    names = node.param_names()

    def no_parameter(p, at):
        fail(at, f"a node of kind {kind} has no parameter {quoted(p)} "
                 f"(parameters: {', '.join(names) or 'none'})")

    if "param_attrs" in raw:
        pa_path = key_path(path, "param_attrs")
        if not isinstance(raw["param_attrs"], dict):
            fail(pa_path, f"expected an object, got {type_name(raw['param_attrs'])}")
        for p, entries in raw["param_attrs"].items():
            entry_path = key_path(pa_path, p)
            if p not in names:
                no_parameter(p, entry_path)
            node.param_attrs[p] = _read_attr_list(entries, entry_path)
    if "frozen" in raw:
        frozen_path = key_path(path, "frozen")
        read_array(raw["frozen"], frozen_path, "frozen")
        for j, p in enumerate(raw["frozen"]):
            read_string(p, index_path(frozen_path, j))
            if p not in names:
                no_parameter(p, index_path(frozen_path, j))
        node.frozen = list(raw["frozen"])
    return node


def _require(raw, path, key):
    if not isinstance(raw, dict):
        fail(path, f"expected an object, got {type_name(raw)}")
    if key not in raw:
        fail(key_path(path, key), "missing required key")


def _read_elements(value, path, dims_limit, numel_limit):
    """Returns the dims of the shape at `path` (each dim and the product within `numel_limit`)."""
    read_array(value, path, dims_limit)
    dims = tuple(read_limited(d, index_path(path, j), numel_limit) for j, d in enumerate(value))
    most = schema.LIMITS[numel_limit][1]
    if math.prod(dims) > most:
        fail(path, f"has more than {most} elements")
    return dims


def _read_offset_shape(value, path):
    return _read_elements(value, path, "offset_dims", "param_numel")


def _read_attr_list(value, path):
    read_array(value, path, "attr_entries")
    entries = []
    for j, raw in enumerate(value):
        entry_path = index_path(path, j)
        read_object(raw, entry_path, required=("name", "value"))
        name = read_name(raw["name"], key_path(entry_path, "name"))
        entries.append(AttrEntry(name, read_value(raw["value"], key_path(entry_path, "value"))))
    return entries


def read_value(value, path, depth=0):
    """Returns the attribute value at `path` as an immutable literal.

    The value itself is at depth 0, the items of a list at depth d at depth d + 1.
    """
    deepest = schema.LIMITS["value_depth"][1]
    if depth > deepest:
        fail(path, f"attribute value nested deeper than {deepest} lists")
    kind = type_name(value)
    if kind in ("null", "boolean", "string"):
        return value
    if kind == "integer":
        return read_int(value, path)
    if kind == "number":
        return float(value)
    if kind == "array":
        read_array(value, path, "value_list_items")
        return tuple(read_value(v, index_path(path, j), depth + 1) for j, v in enumerate(value))
    return _read_tensor(value, path)


def _read_tensor(value, path):
    read_object(value, path, required=("tensor", "shape"))
    numbers_path = key_path(path, "tensor")
    read_array(value["tensor"], numbers_path, "tensor_numel")
    numbers = []
    for j, v in enumerate(value["tensor"]):
        number = float(read_number(v, index_path(numbers_path, j)))
        if abs(number) > _FLOAT32_MAX:
            fail(index_path(numbers_path, j), "does not fit a float32 tensor")
        numbers.append(number)
    shape = _read_elements(value["shape"], key_path(path, "shape"), "tensor_dims", "tensor_numel")
    if math.prod(shape) != len(numbers):
        fail(numbers_path, f"holds {len(numbers)} numbers, the shape needs {math.prod(shape)}")
    return TensorLiteral(tuple(numbers), shape)


def _read_ops(value, path):
    read_array(value, path, "ops")
    return [_read_op(raw, index_path(path, i)) for i, raw in enumerate(value)]


def _read_route(value, path):
    read_array(value, path, "route_length")
    return [read_limited(c, index_path(path, j), "route_choice") for j, c in enumerate(value)]


def tag_problem(tag):
    """Returns what is wrong with checkpoint tag `tag`, or "" (the C++ schema::tag_problem)."""
    lo, hi = schema.LIMITS["tag_bytes"]
    size = len(tag.encode("utf-8"))
    if not lo <= size <= hi:
        return f"tag {quoted(tag)} has {size} bytes, expected {lo}..{hi}"
    for part in schema.TAG_FORBIDDEN:
        if part in tag:
            return f"tag {quoted(tag)} contains {quoted(part)}"
    if tag in schema.RESERVED_TAGS:
        return f"tag {quoted(tag)} is reserved (the checkpoint folder, or a file beside the tags)"
    return ""


def _read_modifier_rank(value, path):
    # A rank or null; the world's own bound is checked once the world size is known.
    if value is None:
        return None
    return read_int(value, path, 0, schema.LIMITS["world_size"][1] - 1)


def _read_scale(value, path):
    scale = float(read_number(value, path))
    lo, hi = schema.SCALE_INCLUSIVE
    if not lo <= scale <= hi:
        fail(path, f"expected a scale in [{lo:g}, {hi:g}]")
    return scale


# What an inject puts where (SCENARIO_FORMAT.md, "Injections"): the value's spelling -> the
# float, and the places it goes into.
INJECT_VALUES = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
INJECT_INTO = ("input", "loss", "gradient")

# How each operation key is read (Op has a field of the same name); one reader per schema key.
_OP_KEY_READERS = schema.every("op_keys", {
    "optimizer": lambda v, p: read_enum(v, p, schema.INITIALIZE_OPTIMIZERS),
    "target": read_string,
    "route": _read_route,
    "module": read_string,
    "param": read_string,
    "name": read_name,
    "value": read_value,
    "world_size": lambda v, p: read_limited(v, p, "world_size"),
    "tag": lambda v, p: read_checked(v, p, tag_problem),
    "optimizer_states": read_bool,
    "module_only": read_bool,
    "modifier_rank": _read_modifier_rank,
    "scale": _read_scale,
    "config_error": lambda v, p: read_enum(v, p, tuple(schema.CONFIG_ERRORS)),
    "rank": lambda v, p: read_int(v, p, 0, schema.LIMITS["world_size"][1] - 1),
    "into": lambda v, p: read_enum(v, p, INJECT_INTO),
})
# Where one key means another thing in one operation: an inject's value is a spelling of
# INJECT_VALUES, not an attribute literal.
_OP_KEY_READERS_OF = {("inject", "value"): lambda v, p: read_enum(v, p, tuple(INJECT_VALUES))}


def _read_op(raw, path):
    _require(raw, path, "op")  # the operation says which keys it may have
    name = read_enum(raw["op"], key_path(path, "op"), tuple(schema.OPS))
    keys = schema.OPS[name]
    read_object(raw, path, required=("op",) + keys.required, optional=keys.optional)
    op = Op(op=name)
    for key in keys.required + keys.optional:
        if key in raw:
            reader = _OP_KEY_READERS_OF.get((name, key), _OP_KEY_READERS[key])
            setattr(op, key, reader(raw[key], key_path(path, key)))
    return op


__all__ = ["FORMAT", "INJECT_INTO", "INJECT_VALUES", "READ_FORMATS", "tag_problem", "AttrEntry", "Node", "Op", "Placement", "Scenario", "ScenarioError",
           "TensorLiteral", "load_scenario", "parse_scenario", "scenario_from_json"]
