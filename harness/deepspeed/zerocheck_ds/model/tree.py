"""Builds the torch.nn.Module tree a scenario describes (no user attributes: see ledger.py).

Every module maps `features` -> `features`. Children of Sequential/ModuleList are registered as
"0", "1", ...; an MoE's experts as "experts.0", ...; an Expert's Linear as "linear", so module
paths are LibTorch's (SCENARIO_FORMAT.md). A node listed twice is one module object registered
at two places (tied weights); its canonical path is where named_modules() meets it first, i.e.
pre-order first appearance. Parameter values are seeded.py's, from the scenario seed and each
parameter's path: the same bits on every rank, in the C++ harness and in every torch version.

The route reaches MoE layers as an explicit argument (a RouteCursor) passed down by the
containers, so no hidden state sits on the user's modules and an engine that forwards
`engine(x, route)` to its module delivers it unchanged.
"""

import contextlib
from dataclasses import dataclass, field

import torch
from torch import nn

from . import seeded


class RouteCursor:
    """A forward's expert choices, taken by MoE layers in call order, cyclically."""

    def __init__(self, route):
        self._route = list(route)
        self._calls = 0

    def choose(self, expert_count):
        """Returns the next expert index in [0, expert_count); an empty route picks 0."""
        if not self._route:
            return 0
        choice = self._route[self._calls % len(self._route)]
        self._calls += 1
        return choice % expert_count


class TakesRoute:
    """Marker: this module's forward is forward(x, route)."""


def run_module(module, x, route):
    """Calls `module` on `x`, handing the route on only to modules that take it."""
    return module(x, route) if isinstance(module, TakesRoute) else module(x)


class OffsetNode(nn.Module):
    """x + sum(value): a parameter of any shape, zero-size included."""

    def __init__(self, shape):
        super().__init__()
        self.value = nn.Parameter(torch.zeros(shape))

    def forward(self, x):
        return x + self.value.sum()


class ExpertNode(nn.Module):
    """One expert: a Linear F -> F under the name `linear`."""

    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        return self.linear(x)


class SequentialNode(nn.Module, TakesRoute):
    """Runs its children "0", "1", ... in order (a tied child runs at each of its places)."""

    def __init__(self, children):
        super().__init__()
        for i, child in enumerate(children):
            self.add_module(str(i), child)

    def forward(self, x, route=None):
        for child in self._modules.values():
            x = run_module(child, x, route)
        return x


class ModuleListNode(nn.ModuleList, TakesRoute):
    """An nn.ModuleList that is also callable: runs its entries in order."""

    def forward(self, x, route=None):
        for child in self:
            x = run_module(child, x, route)
        return x


class MoENode(nn.Module, TakesRoute):
    """Runs one of `experts` per call, chosen by the route."""

    def __init__(self, experts):
        super().__init__()
        self.experts = nn.ModuleList(experts)

    def forward(self, x, route=None):
        route = route if route is not None else RouteCursor([])
        expert = self.experts[route.choose(len(self.experts))]
        return run_module(expert, x, route)


@dataclass
class BuiltTree:
    root: nn.Module
    nodes: dict  # node index -> module, reachable nodes only
    module_paths: dict  # id(module) -> canonical path
    param_names: dict  # id(parameter) -> canonical dotted name
    expert_paths: list  # canonical paths of the distinct Expert nodes, in pre-order
    unreachable: list = field(default_factory=list)  # node indices no parent lists

    def path_of(self, module):
        """Returns the module's canonical path, or None when it is not part of the tree."""
        return self.module_paths.get(id(module))

    def param_key(self, param):
        """Returns (canonical module path, local name) of a parameter, or None."""
        name = self.param_names.get(id(param))
        if name is None:
            return None
        module_path, _, local = name.rpartition(".")
        return module_path, local


def not_whole(root, reference_root):
    """(name, parameter, the scenario's element count) of each parameter of `root` holding another
    number of elements than the same-named one of `reference_root` (a model the scenario built:
    build_tree or the twin), i.e. left partitioned or emptied by an engine. Names the reference
    lacks are not judged: nothing says how many elements they hold."""
    numels = {n: p.numel() for n, p in reference_root.named_parameters()}
    return [(name, p, numels[name]) for name, p in root.named_parameters()
            if name in numels and p.data.numel() != numels[name]]


def _reachable(tree):
    seen, stack = {0}, [0]
    while stack:
        for child in tree[stack.pop()].children:
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return seen


def _make_module(node, features, children):
    kind = node.kind
    if kind == "Linear":
        return nn.Linear(features, features, bias=node.bias)
    if kind == "LayerNorm":
        return nn.LayerNorm(features)
    if kind == "Tanh":
        return nn.Tanh()
    if kind == "Offset":
        return OffsetNode(node.shape)
    if kind == "Expert":
        return ExpertNode(features)
    if kind == "Sequential":
        return SequentialNode(children)
    if kind == "ModuleList":
        return ModuleListNode(children)
    if kind == "MoE":
        return MoENode(children)
    raise AssertionError(f"node kind {kind!r} passed the reader but has no builder")


class EagerConstruction:
    """Plain modules, their parameters whole and writable (the scenario's "eager")."""

    def building(self):
        return contextlib.nullcontext()

    def writable(self, root):
        return contextlib.nullcontext()


def build_tree(scenario, construction=None):
    """Returns the scenario's model: fresh modules, frozen parameters, seeded parameter values.

    `construction` (default eager): the context the modules are made in (`building()`, e.g.
    DeepSpeed's zero.Init, which partitions each parameter as it is made), and the one in which
    the whole parameters can be written (`writable(root)`)."""
    construction = construction or EagerConstruction()
    tree = scenario.tree
    reachable = _reachable(tree)
    nodes = {}
    with construction.building():
        # Children have larger indices than their parents, so building backwards finds them ready.
        for index in sorted(reachable, reverse=True):
            node = tree[index]
            nodes[index] = _make_module(node, scenario.features, [nodes[c] for c in node.children])
            for name in node.frozen:
                nodes[index].get_parameter(name).requires_grad_(False)
    root = nodes[0]

    with construction.writable(root):
        seeded.fill_parameters(root, scenario.seed)

    module_paths = {id(m): path for path, m in root.named_modules()}
    param_names = {id(p): name for name, p in root.named_parameters()}
    # Every Expert node, wherever it sits (an MoE or a plain ModuleList, as in the bug report):
    # engine/placement.h places "every Expert", and both readers must mean the same modules.
    expert_paths = []
    for index in sorted(reachable):
        if tree[index].kind == "Expert":
            path = module_paths[id(nodes[index])]
            if path not in expert_paths:
                expert_paths.append(path)
    pre_order = {path: i for i, path in enumerate(module_paths.values())}
    expert_paths.sort(key=pre_order.__getitem__)
    unreachable = [i for i in range(len(tree)) if i not in reachable]
    return BuiltTree(root, nodes, module_paths, param_names, expert_paths, unreachable)
