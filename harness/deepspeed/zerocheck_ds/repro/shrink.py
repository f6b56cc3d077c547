"""Scenario minimiser: turns a failing scenario file into a small one that still fails.

Works on the raw JSON document (what json.load returns for a scenario file) and an expensive
oracle, `still_fails(candidate) -> bool`, that replays a candidate on the real engine (seconds
per call). So the search is greedy, biggest reductions first, and the oracle only ever sees
candidates the strict reader (scenario.py) accepts: every candidate is serialised and read back
through `parse_scenario`, the same decode path as `load_scenario`.

Reductions, in the order they are tried (`reductions` yields them in this order):
  1. world size: to 1, then 2 and half (when smaller). `config.train_batch_size` is dropped when
     it no longer equals micro batch * accumulation * world size; placement-map ranks are
     clipped to the new world size.
  2. operations, delta-debugging style: remove chunks of ceil(n/2), ceil(n/4), ..., 1 ops.
  3. subtrees: drop unreachable nodes; remove one child reference from a Sequential, ModuleList
     or MoE (largest subtree first); hoist a container's child into the container's place
     (the root included). Unreachable nodes are garbage-collected and the rest renumbered in
     their original order, so children stay greater than their parents.
  4. attributes: all of one node's user attributes, then single `attrs`, `param_attrs` and
     `frozen` entries; empty `param_attrs` lists; single placement-map entries.
  5. simplifications: batch 1, fewer features (1, 2, half), a Linear without bias, an Offset
     of shape [1] (or [0] when it is zero-size with more dimensions).

Module paths: tree edits change LibTorch paths ("1.experts.2" becomes "1.experts.1" when expert
0 goes), so the `module` of set_attr/del_attr, the `target` of initialize and the keys of a
placement map are rewritten: a path follows its own route through the edit when that route
survives, else the module's canonical (first pre-order) path when the module survives, else
the op or map entry is dropped. The root path "" always stays "" (after hoisting the root it
names the new root: "the whole model"). A path that resolved to nothing before stays as written
while it still resolves to nothing, so a deliberately dangling set_attr keeps its meaning.

Termination: every candidate is strictly smaller than its scenario in a measure vector (world
size, ops, nodes, edges, attribute entries, features, batch, ...): no component grows and one
shrinks. A shrink therefore reaches a fixpoint.

Pure Python, torch-free; nothing is shared between calls, so calls may run in parallel threads.
"""

import copy
import json
import time
from dataclasses import dataclass, field

from ..scenario import schema
from ..scenario.scenario import ScenarioError, parse_scenario
from ..scenario.strict_json import fail

CONTAINER_KINDS = schema.CONTAINER_KINDS
# Containers whose path segments are child positions (an MoE's go through "experts").
_POSITIONAL_CONTAINERS = schema.some("node_kinds", "Sequential", "ModuleList")

# Ops whose key names a module path; the reader fills in "" when it is absent.
PATH_KEYS = schema.some("ops", {"initialize": "target", "set_attr": "module", "del_attr": "module",
                                "gather": "module"})
assert all(key in schema.OPS[op].optional for op, key in PATH_KEYS.items()), PATH_KEYS

# Reduction passes, in the order they are tried. A candidate's key starts with its pass's index.
PASSES = ("world_size", "ops", "subtrees", "attributes", "simplifications")

# Weighs an Offset's dimensions above its element count, so [0, 3] -> [1] counts as smaller.
_OFFSET_DIM_WEIGHT = (1 << 16) + 1


@dataclass
class ShrinkResult:
    scenario: dict  # the smallest failing scenario found (the input when nothing was accepted)
    before: dict  # size(input)
    after: dict  # size(scenario)
    attempts: int  # oracle calls
    accepted: int  # candidates the oracle confirmed (each one replaced the scenario)
    seconds: float
    stopped: str  # "fixpoint": no reduction still fails; "deadline": time ran out first
    history: list = field(default_factory=list)  # descriptions of the accepted reductions
    repeats_skipped: int = 0  # candidates already refused by the oracle, not asked again


# ---------------------------------------------------------------------------------------------
# Public surface


def validate(scenario):
    """Reads `scenario` (a JSON document as a dict) with the strict reader.

    Raises ScenarioError naming the JSON path when the reader refuses it, or at `$` when the dict
    is not JSON (a NaN, an object that json cannot write).
    """
    try:
        text = json.dumps(scenario, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        fail("$", f"not a JSON document: {e}")
    parse_scenario(text)


def is_valid(scenario):
    """Returns True when the strict reader accepts `scenario`."""
    try:
        validate(scenario)
    except ScenarioError:
        return False
    return True


def size(scenario):
    """Returns the size of a valid scenario, as compared before and after a shrink.

    {"ops": operations, "modules": nodes reachable from node 0 (a tied node counts once),
     "attrs": user attribute entries the tree itself writes, i.e. `attrs` entries plus
     `param_attrs` list entries of the reachable nodes (set_attr/del_attr count under "ops"),
     "world_size": ranks}.
    """
    tree = scenario["tree"]
    reachable = _reachable(tree, 0)
    return {
        "ops": len(scenario["ops"]),
        "modules": len(reachable),
        "attrs": sum(_attr_entries(tree[i]) for i in reachable),
        "world_size": scenario["world_size"],
    }


def reductions(scenario):
    """Yields (description, candidate) for a valid scenario, biggest reductions first.

    Each candidate is a new dict the strict reader accepts and strictly smaller than `scenario`
    (see the module comment); `scenario` itself is never modified. Candidates are built lazily.
    """
    for _, description, build in _proposals(scenario):
        candidate = build()
        if candidate is not None:
            yield description, candidate


def shrink(scenario, still_fails, deadline, on_progress=None):
    """Returns a ShrinkResult with the smallest scenario found that still fails.

    Requires: `scenario` is valid and still_fails(scenario) is true (it is not asked again).
    `still_fails(candidate)` is called only on valid candidates; an exception from it propagates.
    `deadline` is a time.monotonic() value, checked before each oracle call (a call in flight
    is not interrupted). `on_progress(description, size, attempts)` is called after each
    accepted reduction. Raises ScenarioError when `scenario` is not valid.

    Greedy, first improvement: the first candidate that still fails replaces the scenario and
    the candidates of the new scenario are generated afresh. Within a round the search resumes
    at the pass (and op-chunk size) that just succeeded, as delta debugging does, instead of
    retrying every earlier pass after each success; a round that accepts something is followed
    by a full round, and a full round that accepts nothing is the fixpoint. Candidates the oracle
    already refused are not asked again (the oracle is assumed deterministic).
    """
    started = time.monotonic()
    validate(scenario)
    current = copy.deepcopy(scenario)
    result = ShrinkResult(scenario=current, before=size(current), after=size(current),
                          attempts=0, accepted=0, seconds=0.0, stopped="fixpoint")
    refused = set()  # canonical JSON of candidates the oracle refused
    resume_at = None  # key of the last accepted candidate; None: a full round
    while True:
        accepted_key = None
        for key, description, build in _proposals(current):
            if resume_at is not None and key < resume_at:
                continue
            if time.monotonic() >= deadline:
                result.stopped = "deadline"
                break
            candidate = build()
            if candidate is None:
                continue
            fingerprint = json.dumps(candidate, sort_keys=True, separators=(",", ":"))
            if fingerprint in refused:
                result.repeats_skipped += 1
                continue
            result.attempts += 1
            if not still_fails(candidate):
                refused.add(fingerprint)
                continue
            current = candidate
            result.accepted += 1
            result.history.append(description)
            accepted_key = key
            if on_progress is not None:
                on_progress(description, size(current), result.attempts)
            break
        if result.stopped == "deadline":
            break
        if accepted_key is not None:
            resume_at = accepted_key
        elif resume_at is not None:
            resume_at = None  # a resumed round ran out: check everything once more
        else:
            break
    result.scenario = current
    result.after = size(current)
    result.seconds = time.monotonic() - started
    return result


# ---------------------------------------------------------------------------------------------
# Proposals: (key, description, build). Keys increase along the order of proposals, so
# "resume at key K" skips exactly what was proposed before K in a round.


def _proposals(doc):
    base = _measure(doc)

    def checked(make):
        def build():
            candidate = make()
            if candidate is None or not _strictly_smaller(_measure(candidate), base):
                return None
            return candidate if is_valid(candidate) else None
        return build

    passes = (_world_size_proposals, _op_proposals, _subtree_proposals, _attribute_proposals,
              _simplification_proposals)
    for number, proposals in enumerate(passes):
        for level, index, description, make in proposals(doc):
            yield (number, level, index), description, checked(make)


def _world_size_proposals(doc):
    world_size = doc["world_size"]
    smaller = sorted(w for w in {1, 2, world_size // 2} if 0 < w < world_size)
    for index, w in enumerate(smaller):
        yield 0, index, f"world_size {world_size} -> {w}", lambda w=w: _with_world_size(doc, w)


def _with_world_size(doc, world_size):
    candidate = copy.deepcopy(doc)
    candidate["world_size"] = world_size
    config = candidate["config"]
    if isinstance(config, dict) and "train_batch_size" in config:
        implied = (config.get("train_micro_batch_size_per_gpu", 1)
                   * config.get("gradient_accumulation_steps", 1) * world_size)
        if config["train_batch_size"] != implied:
            del config["train_batch_size"]
    for owners in _placement_maps(candidate):
        for path, rank in owners.items():
            if type(rank) is int and rank >= world_size:
                owners[path] = world_size - 1
    for op in candidate.get("ops", ()):  # a gather's modifier rank must stay one of the ranks
        if isinstance(op, dict) and type(op.get("modifier_rank")) is int and op["modifier_rank"] >= world_size:
            op["modifier_rank"] = world_size - 1
    return candidate


def _op_proposals(doc):
    count = len(doc["ops"])
    chunk_sizes, chunk = [], count
    while chunk > 1:
        chunk = (chunk + 1) // 2
        chunk_sizes.append(chunk)
    if count == 1:
        chunk_sizes = [1]
    for chunk in chunk_sizes:
        for start in range(0, count, chunk):
            end = min(start + chunk, count)
            what = f"remove ops[{start}]" if end - start == 1 else f"remove ops[{start}:{end}]"
            # Bigger chunks first: the key's level orders by descending chunk size.
            yield -chunk, start, what, lambda start=start, end=end: _without_ops(doc, start, end)


def _without_ops(doc, start, end):
    candidate = copy.deepcopy(doc)
    del candidate["ops"][start:end]
    return candidate


def _subtree_proposals(doc):
    tree = doc["tree"]
    reachable = _reachable(tree, 0)
    index = 0
    if len(reachable) < len(tree):
        yield 0, index, f"drop {len(tree) - len(reachable)} unreachable nodes", \
            lambda: _edit_tree(doc, copy.deepcopy(tree), 0, lambda steps: steps)
        index += 1

    # A wide container (the bug report's 60 experts) loses its children in halves, quarters, ...
    # first: one child at a time would cost a DeepSpeed run per child.
    for parent in sorted(reachable):
        node = tree[parent]
        count = len(node.get("children", []))
        if node["kind"] not in CONTAINER_KINDS or count < 4:
            continue
        chunk = count
        while chunk > 2:
            chunk = (chunk + 1) // 2
            for start in range(0, count, chunk):
                end = min(start + chunk, count)

                def make(parent=parent, start=start, end=end):
                    edited = copy.deepcopy(tree)
                    del edited[parent]["children"][start:end]
                    return _edit_tree(doc, edited, 0, _removal_steps(parent, start, end))
                yield 0, index, (f"remove children {start}..{end - 1} of tree[{parent}] "
                                 f"{node['kind']}"), make
                index += 1

    removals = []  # (modules removed, description, make)
    for parent in sorted(reachable):
        node = tree[parent]
        if node["kind"] not in CONTAINER_KINDS:
            continue
        for position, child in enumerate(node.get("children", [])):
            lost = len(reachable) - len(_reachable(tree, 0, skip=(parent, position)))
            description = (f"remove child {position} (node {child}, {tree[child]['kind']}) "
                           f"of tree[{parent}] {node['kind']}")

            def make(parent=parent, position=position):
                edited = copy.deepcopy(tree)
                del edited[parent]["children"][position]
                return _edit_tree(doc, edited, 0, _removal_steps(parent, position))
            removals.append((lost, description, make))
    # Largest subtree first; ties keep tree order (sorted() is stable).
    for lost, description, make in sorted(removals, key=lambda r: -r[0]):
        yield 0, index, description, make
        index += 1

    # Hoisting replaces a container by one of its children. Only a container referenced once is
    # hoisted: then it disappears and the tree strictly shrinks.
    references = _reference_counts(tree, reachable)
    for container in sorted(reachable):
        node = tree[container]
        if node["kind"] not in CONTAINER_KINDS or (container != 0 and references[container] != 1):
            continue
        if container != 0:
            parent, position = _only_reference(tree, reachable, container)
        for choice, child in enumerate(node.get("children", [])):
            description = (f"hoist child {choice} (node {child}, {tree[child]['kind']}) into the "
                           f"place of tree[{container}] {node['kind']}")
            if container == 0:
                make = lambda child=child, choice=choice: _edit_tree(
                    doc, copy.deepcopy(tree), child, _root_hoist_steps(choice))
            else:
                def make(parent=parent, position=position, child=child, choice=choice,
                         container=container):
                    edited = copy.deepcopy(tree)
                    edited[parent]["children"][position] = child
                    return _edit_tree(doc, edited, 0,
                                      _hoist_steps(parent, position, container, choice))
            yield 0, index, description, make
            index += 1


def _attribute_proposals(doc):
    tree = doc["tree"]
    index = 0

    def edit(i, change):
        def make():
            candidate = copy.deepcopy(doc)
            change(candidate["tree"][i])
            return candidate
        return make

    reachable = sorted(_reachable(tree, 0))
    for i in reachable:
        node = tree[i]
        if _attr_entries(node) + len(node.get("frozen", [])) > 1:
            def clear(n):
                for key in ("attrs", "param_attrs", "frozen"):
                    n.pop(key, None)
            yield 0, index, f"tree[{i}]: remove every user attribute and frozen flag", \
                edit(i, clear)
            index += 1
    for i in reachable:
        node = tree[i]
        for j, entry in enumerate(node.get("attrs", [])):
            yield 0, index, f"tree[{i}]: remove attrs[{j}] {_name_of(entry)}", \
                edit(i, lambda n, j=j: _remove_entry(n, "attrs", j))
            index += 1
        for param, entries in node.get("param_attrs", {}).items():
            if not entries:
                yield 0, index, f"tree[{i}]: remove the empty param_attrs[{param!r}]", \
                    edit(i, lambda n, p=param: _remove_param_attrs(n, p))
                index += 1
            for j, entry in enumerate(entries):
                yield 0, index, f"tree[{i}]: remove param_attrs[{param!r}][{j}] {_name_of(entry)}", \
                    edit(i, lambda n, p=param, j=j: _remove_param_entry(n, p, j))
                index += 1
        for j, param in enumerate(node.get("frozen", [])):
            yield 0, index, f"tree[{i}]: unfreeze {param!r}", \
                edit(i, lambda n, j=j: _remove_entry(n, "frozen", j))
            index += 1
    # A placement-map entry outlives its module only as a dangling path (I2 then skips it);
    # entries of live modules may be irrelevant to the failure too.
    for number, owners in enumerate(_placement_maps(doc)):
        for path in owners:
            def without_owner(number=number, path=path):
                candidate = copy.deepcopy(doc)
                del list(_placement_maps(candidate))[number][path]
                return candidate
            yield 0, index, f"remove placement owners[{path!r}]", without_owner
            index += 1


def _simplification_proposals(doc):
    index = 0

    def with_top(key, value):
        def make():
            candidate = copy.deepcopy(doc)
            candidate[key] = value
            return candidate
        return make

    if doc["batch"] > 1:
        yield 0, index, f"batch {doc['batch']} -> 1", with_top("batch", 1)
        index += 1
    features = doc["features"]
    for f in sorted({1, 2, features // 2} - {0}):
        if f < features:
            yield 0, index, f"features {features} -> {f}", with_top("features", f)
            index += 1

    tree = doc["tree"]
    for i in sorted(_reachable(tree, 0)):
        node = tree[i]
        if node["kind"] == "Linear" and node.get("bias", True) is True:
            def without_bias(i=i):
                candidate = copy.deepcopy(doc)
                n = candidate["tree"][i]
                n["bias"] = False
                if "bias" in n.get("frozen", []):
                    n["frozen"] = [p for p in n["frozen"] if p != "bias"]
                    if not n["frozen"]:
                        del n["frozen"]
                if "bias" in n.get("param_attrs", {}):
                    _remove_param_attrs(n, "bias")
                return candidate
            yield 0, index, f"tree[{i}]: Linear without bias", without_bias
            index += 1
        if node["kind"] == "Offset":
            shape = node.get("shape", [])
            for simpler in ([1], [0]):
                if shape != simpler:
                    def with_shape(i=i, simpler=simpler):
                        candidate = copy.deepcopy(doc)
                        candidate["tree"][i]["shape"] = list(simpler)
                        return candidate
                    # The measure refuses what is not smaller ([0] -> [1], [] -> [1]).
                    yield 0, index, f"tree[{i}]: Offset shape {shape} -> {simpler}", with_shape
                    index += 1


# ---------------------------------------------------------------------------------------------
# Tree edits and module paths. A route is the list of (parent node, child position) steps from
# the root; paths are spelled from routes, so renumbering nodes never changes a path.


def _edit_tree(doc, edited, root, rewrite_route):
    """Returns `doc` with `edited` (node indices of `doc`) rooted at `root` as its tree.

    Unreachable nodes are dropped, the rest renumbered in their original order; module paths in
    ops and placement maps are rewritten: `rewrite_route(route)` gives the route in `edited` or
    None when it does not survive the edit.
    """
    old_tree = doc["tree"]
    canonical = _canonical_routes(edited, root)
    order = sorted(canonical)
    assert order[0] == root, "children must have greater indices than their parents"
    renumbered = {old: new for new, old in enumerate(order)}

    def rewrite(path):
        """Returns (new path or None, True when the path's own route survived)."""
        if path == "":
            return "", True
        found = _resolve(old_tree, 0, path)
        if found is None:
            return (path, True) if _resolve(edited, root, path) is None else (None, False)
        route, node, suffix = found
        new_route = rewrite_route(route)
        if new_route is not None:
            new_path = _spell(edited, new_route, suffix)
            again = _resolve(edited, root, new_path)
            if again is not None and again[1:] == (node, suffix):
                return new_path, True
        if node in canonical:
            return _spell(edited, canonical[node], suffix), False
        return None, False

    candidate = copy.deepcopy(doc)
    tree = []
    for old in order:
        node = copy.deepcopy(edited[old])
        if "children" in node:
            node["children"] = [renumbered[c] for c in node["children"]]
        tree.append(node)
    candidate["tree"] = tree

    ops = []
    for op in candidate["ops"]:
        key = PATH_KEYS.get(op.get("op"))
        if key is not None and key in op:
            new_path, _ = rewrite(op[key])
            if new_path is None:
                continue  # its module is gone
            op[key] = new_path
        ops.append(op)
    candidate["ops"] = ops

    for owners in _placement_maps(candidate):
        rewritten = [(rewrite(path), rank) for path, rank in owners.items()]
        # A path whose own route survived wins its new key over one that fell back to the
        # module's canonical path; otherwise the earlier entry wins.
        chosen, taken = {}, set()
        for exact in (True, False):
            for i, ((new_path, survived), rank) in enumerate(rewritten):
                if new_path is not None and survived == exact and new_path not in taken:
                    taken.add(new_path)
                    chosen[i] = (new_path, rank)
        owners.clear()
        owners.update(chosen[i] for i in sorted(chosen))
    return candidate


def _removal_steps(parent, position, end=None):
    """Route rewrite for removing children `position` (up to `end`, exclusive) of `parent`."""
    end = position + 1 if end is None else end

    def rewrite(route):
        new_route = []
        for node, pos in route:
            if node == parent:
                if position <= pos < end:
                    return None
                if pos >= end:
                    pos -= end - position
            new_route.append((node, pos))
        return new_route
    return rewrite


def _hoist_steps(parent, position, container, choice):
    """Route rewrite for parent.children[position] = container.children[choice]."""
    def rewrite(route):
        for i, step in enumerate(route):
            if step == (parent, position):
                if i + 1 < len(route) and route[i + 1] == (container, choice):
                    return route[:i + 1] + route[i + 2:]
                return None  # the container itself, or one of its other children
        return list(route)
    return rewrite


def _root_hoist_steps(choice):
    """Route rewrite for making the root's child `choice` the root."""
    def rewrite(route):
        if route and route[0] == (0, choice):
            return route[1:]
        return None
    return rewrite


def _resolve(tree, root, path):
    """Returns (route, node, suffix) for a module path, or None when get_submodule would fail.

    `suffix` is "" for a node itself, "linear" for an Expert's Linear, "experts" for an MoE's
    ModuleList of experts: the modules that are not nodes.
    """
    route, node = [], root
    if path == "":
        return route, node, ""
    segments = path.split(".")
    i = 0
    while i < len(segments):
        kind, children = tree[node]["kind"], tree[node].get("children", [])
        last = i + 1 == len(segments)
        if kind in _POSITIONAL_CONTAINERS:
            position = _position(segments[i], len(children))
        elif kind == "MoE":
            if segments[i] != "experts":
                return None
            if last:
                return route, node, "experts"
            i += 1
            position = _position(segments[i], len(children))
        elif kind == "Expert":
            return (route, node, "linear") if segments[i] == "linear" and last else None
        else:
            return None
        if position is None:
            return None
        route.append((node, position))
        node = children[position]
        i += 1
    return route, node, ""


def _position(segment, count):
    """Returns the child position a path segment names, or None (LibTorch names are str(i))."""
    try:
        position = int(segment)
    except ValueError:
        return None
    return position if str(position) == segment and 0 <= position < count else None


def _spell(tree, route, suffix):
    parts = []
    for parent, position in route:
        if tree[parent]["kind"] == "MoE":
            parts.append("experts")
        parts.append(str(position))
    if suffix:
        parts.append(suffix)
    return ".".join(parts)


def _canonical_routes(tree, root):
    """Returns {node: route} for the nodes reachable from `root`: each node's first pre-order
    appearance, which is where named_modules() meets a shared module first."""
    routes = {root: []}

    def visit(node):
        for position, child in enumerate(tree[node].get("children", [])):
            if child not in routes:
                routes[child] = routes[node] + [(node, position)]
                visit(child)

    visit(root)
    return routes


def _reachable(tree, root, skip=None):
    """Returns the nodes reachable from `root`, not following the edge `skip` (parent, position)."""
    seen, stack = {root}, [root]
    while stack:
        node = stack.pop()
        for position, child in enumerate(tree[node].get("children", [])):
            if child not in seen and (node, position) != skip:
                seen.add(child)
                stack.append(child)
    return seen


def _reference_counts(tree, reachable):
    counts = {i: 0 for i in reachable}
    for i in reachable:
        for child in tree[i].get("children", []):
            counts[child] += 1
    return counts


def _only_reference(tree, reachable, node):
    for parent in sorted(reachable):
        children = tree[parent].get("children", [])
        if node in children:
            return parent, children.index(node)
    raise AssertionError(f"node {node} is reachable but no reachable node lists it")


def _placement_maps(doc):
    """Yields the `owners` objects of the placement maps in `doc` (top level and config)."""
    places = [doc.get("placement")]
    config = doc.get("config")
    if isinstance(config, dict) and isinstance(config.get("zerocheck"), dict):
        places.append(config["zerocheck"].get("placement"))
    for placement in places:
        if (isinstance(placement, dict) and placement.get("kind") == "map"
                and isinstance(placement.get("owners"), dict)):
            yield placement["owners"]


# ---------------------------------------------------------------------------------------------
# Attribute entries and the measure


def _attr_entries(node):
    return len(node.get("attrs", [])) + sum(len(v) for v in node.get("param_attrs", {}).values())


def _name_of(entry):
    return repr(entry["name"]) if isinstance(entry, dict) and "name" in entry else ""


def _remove_entry(node, key, j):
    del node[key][j]
    if not node[key]:
        del node[key]


def _remove_param_entry(node, param, j):
    del node["param_attrs"][param][j]
    if not node["param_attrs"][param]:
        _remove_param_attrs(node, param)


def _remove_param_attrs(node, param):
    del node["param_attrs"][param]
    if not node["param_attrs"]:
        del node["param_attrs"]


def _measure(doc):
    """Returns the vector every reduction must shrink: no component grows, one shrinks."""
    tree = doc["tree"]
    reachable = _reachable(tree, 0)
    offsets = [n.get("shape", []) for n in tree if n["kind"] == "Offset"]
    config = doc["config"]
    return (
        doc["world_size"],
        len(doc["ops"]),
        len(tree),
        len(reachable),
        sum(len(n.get("children", [])) for n in tree),
        sum(_attr_entries(n) for n in tree),
        sum(len(n.get("param_attrs", {})) for n in tree),
        sum(len(n.get("frozen", [])) for n in tree),
        sum(1 for n in tree if n["kind"] == "Linear" and n.get("bias", True) is True),
        doc["features"],
        doc["batch"],
        sum(len(s) * _OFFSET_DIM_WEIGHT + _numel(s) for s in offsets),
        sum(len(owners) for owners in _placement_maps(doc)),
        len(config) if isinstance(config, dict) else 0,
    )


def _numel(shape):
    numel = 1
    for dim in shape:
        numel *= dim
    return numel


def _strictly_smaller(measure, base):
    return all(m <= b for m, b in zip(measure, base)) and measure != base


__all__ = ["PASSES", "ShrinkResult", "is_valid", "reductions", "shrink", "size", "validate"]
