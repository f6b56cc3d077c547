"""The names of a scenario tree's parameters as torch's `named_parameters()` spells them, torch-free.

The reader needs them before torch is imported (an `inject` into the gradient of a parameter the
tree does not have is bad input, exit 2). The rule is model/tree.py's: module paths are LibTorch's
(Sequential and ModuleList children "0", "1", ...; an MoE's experts "experts.0", ...; an Expert's
Linear "linear"), a node listed twice is one module met first in pre-order, and unreachable nodes
are not part of the model. tests/test_injection.py holds this to build_tree's named_parameters().
"""

from . import schema


def _child_prefix(kind, position):
    # An MoE registers its children in an nn.ModuleList named "experts" (model/tree.py MoENode).
    return f"experts.{position}" if kind == "MoE" else str(position)


def parameter_names(tree):
    """Returns the canonical dotted names of `tree`'s parameters (a list of scenario.Node), in
    named_parameters() order (pre-order, each module once)."""
    names, seen = [], set()

    def visit(index, path):
        if index in seen:
            return
        seen.add(index)
        node = tree[index]
        for local in node.param_names():
            names.append(f"{path}.{local}" if path else local)
        for position, child in enumerate(node.children):
            prefix = _child_prefix(node.kind, position)
            visit(child, f"{path}.{prefix}" if path else prefix)

    visit(0, "")
    return names


assert "MoE" in schema.NODE_KINDS, "the experts' prefix above is for a kind the schema has"
