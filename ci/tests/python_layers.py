#!/usr/bin/env python3
"""Every import of the Python suite runs down its layers: the layers are the package's LAYERS table.

usage: python_layers.py PACKAGE_DIR

PACKAGE_DIR is a package (harness/deepspeed/zerocheck_ds) whose __init__.py lists its subpackages
from the ground up in LAYERS, a tuple of (name, job) pairs. A module belongs to the layer of the
subpackage it lies in; the package's own __init__.py and __main__.py stand above every layer. A
module may import modules of its own subpackage and of subpackages on lower layers; every import
counts, at the top of a file or inside a function. The check fails on an import that runs back up
(FILE:LINE, importer -> imported, both layers), on modules that import each other in a circle
(each import of the circle, FILE:LINE), and on a module no layer holds. It prints the layers with
their modules when all is well.
"""
import ast
import os
import sys

FACE = ("__init__.py", "__main__.py")  # the package's own files, above every layer


def read_layers(package_dir):
    """The subpackage names of LAYERS in __init__.py, from the ground up (read, never imported)."""
    path = os.path.join(package_dir, "__init__.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "LAYERS" for t in node.targets):
            return [name for name, _job in ast.literal_eval(node.value)]
    raise SystemExit(f"python_layers: {path} has no LAYERS table")


def modules_of(package_dir):
    """Relative path -> dotted name (under the package's own name) of every .py file."""
    package = os.path.basename(os.path.normpath(package_dir))
    found = {}
    for folder, subfolders, names in os.walk(package_dir):
        subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
        for name in sorted(names):
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(folder, name), package_dir).replace(os.sep, "/")
                parts = [package] + rel[:-3].split("/")
                if parts[-1] == "__init__":
                    parts.pop()
                found[rel] = ".".join(parts)
    return found


def imports_of(path, dotted, is_package, known):
    """(line, imported module's dotted name) for each import of a module in `known`, once a line."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    here = dotted.split(".") if is_package else dotted.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    found.append((node.lineno, alias.name))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - (node.level - 1)] + (node.module.split(".") if node.module else [])
                base = ".".join(base)
            else:
                base = node.module or ""
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule in known:  # `from . import x` of a module x
                    found.append((node.lineno, submodule))
                elif base in known:  # a name defined in `base`
                    found.append((node.lineno, base))
    return sorted(set(found))


def check(package_dir):
    """Returns (problems, report lines)."""
    layers = read_layers(package_dir)
    modules = modules_of(package_dir)
    dotted_to_rel = {d: r for r, d in modules.items()}
    problems = []

    def layer(rel):
        """(number, name) of the module's layer, or None when no layer holds it."""
        top = rel.split("/")[0]
        if "/" not in rel:
            return (len(layers) + 1, "the package's face") if rel in FACE else None
        return (layers.index(top) + 1, top) if top in layers else None

    for rel in modules:
        if layer(rel) is None:
            problems.append(f"{rel}: no layer holds this module: put it in a subpackage that LAYERS "
                            f"lists ({', '.join(layers)}), or list its subpackage there")

    edges = {}  # importer -> {imported: first line}
    count = 0
    for rel, dotted in modules.items():
        path = os.path.join(package_dir, rel)
        for line, imported in imports_of(path, dotted, rel.endswith("__init__.py"), dotted_to_rel):
            if imported == dotted:
                continue
            count += 1
            edges.setdefault(rel, {}).setdefault(dotted_to_rel[imported], line)
            mine, theirs = layer(rel), layer(dotted_to_rel[imported])
            if mine and theirs and theirs[0] > mine[0]:
                problems.append(f"{rel}:{line}: {rel} -> {dotted_to_rel[imported]} runs back up: layer "
                                f"{mine[0]} ({mine[1]}) imports layer {theirs[0]} ({theirs[1]})")

    for circle in circles(edges):
        members = set(circle)
        ties = [f"{a}:{line}: {a} -> {b}" for a in circle for b, line in sorted(edges.get(a, {}).items())
                if b in members]
        problems.append(f"circle of {len(circle)} modules: {', '.join(circle)}\n  " + "\n  ".join(ties))

    report = [f"python_layers: {len(modules)} modules, {count} imports on {len(layers)} layers, "
              f"{len(problems)} problems"]
    for number, name in enumerate(layers, 1):
        inside = sorted(r.split("/", 1)[1] for r in modules if r.startswith(name + "/"))
        report.append(f"  layer {number} {name}: {', '.join(inside)}")
    return problems, report


def circles(edges):
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def main(package_dir):
    problems, report = check(package_dir)
    for p in problems:
        print(p)
    for line in report:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
