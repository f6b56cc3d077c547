"""schema.json is the one list of kinds, operations, keys, limits, invariants and error kinds.

The package reads every such list from it (zerocheck_ds/scenario/schema.py); this test keeps it that way:
no Python file of zerocheck_ds holds a literal list, tuple or set of two or more names of one
schema category, nor a dict keyed by them unless the dict is handed to schema.every/schema.some
(which check it against the schema at import).
"""

import ast
import os
import unittest

from . import support  # noqa: F401  (puts zerocheck_ds on sys.path)
from zerocheck_ds.scenario import schema

PACKAGE = os.path.join(support.PACKAGE_ROOT, "zerocheck_ds")

# Categories whose names are distinctive; op keys ("name", "value", ...) are ordinary words.
CHECKED = ("node_kinds", "ops", "placement_kinds", "optimizers", "initialize_optimizers",
           "invariants", "error_kinds", "config_keys")


def schema_names(strings):
    """Returns {category: names} for the categories with two or more of `strings`."""
    found = {}
    for category in CHECKED:
        names = {s for s in strings if s in schema.CATEGORIES[category]}
        if len(names) >= 2:
            found[category] = sorted(names)
    return found


def literal_copies(source, filename):
    """Yields "file:line: category [names]" for each literal copy of a schema list in `source`."""
    tree = ast.parse(source, filename)
    checked_dicts = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("every", "some"):
                checked_dicts.update(id(a) for a in node.args if isinstance(a, ast.Dict))
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items = node.elts
        elif isinstance(node, ast.Dict) and id(node) not in checked_dicts:
            items = node.keys
        else:
            continue
        strings = [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]
        for category, names in schema_names(strings).items():
            yield f"{os.path.basename(filename)}:{node.lineno}: {category} {names}"


class SchemaIsTheOnlyList(unittest.TestCase):
    def test_the_schema_has_every_table(self):
        self.assertEqual(schema.INVARIANTS, tuple(f"I{i}" for i in range(1, 12)))
        self.assertIn("AlreadyInitialized", schema.ERROR_KINDS)
        self.assertEqual(schema.OPTIMIZERS["sgd"], 0.9)
        self.assertTrue(all(schema.OPS[op] for op in schema.OPS))
        self.assertIn("lr_exclusive", schema.LIMITS)

    def test_no_literal_copy_of_a_schema_list(self):
        copies, files = [], 0
        for folder, subfolders, names in os.walk(PACKAGE):  # every subpackage too
            subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
            for name in sorted(names):
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    files += 1
                    with open(path, encoding="utf-8") as f:
                        copies += literal_copies(f.read(), path)
        self.assertGreater(files, 40, "the walk must see the whole package")
        self.assertEqual(copies, [], "take these lists from zerocheck_ds/scenario/schema.py")

    def test_the_check_sees_a_copy(self):
        self.assertEqual(len(list(literal_copies('KINDS = ("Linear", "MoE")', "x.py"))), 1)
        self.assertEqual(len(list(literal_copies('T = {"I1": 1, "I2": 2}', "x.py"))), 1)
        self.assertEqual(list(literal_copies('T = schema.every("ops", {"I1": 1, "I2": 2})', "x.py")), [])
        self.assertEqual(list(literal_copies('x == "Linear"', "x.py")), [])

    def test_subset_and_table_checks(self):
        self.assertEqual(schema.some("invariants", "I1", "I5"), ("I1", "I5"))
        with self.assertRaises(AssertionError):
            schema.some("invariants", "I12")

    def test_i9_comes_from_the_cxx_table(self):
        # One source for every invariant's statement: the C++ table, through schema.json.
        self.assertIn("I9", schema.INVARIANTS)
        self.assertIn("agree", schema.INVARIANT_STATEMENTS["I9"])
        self.assertEqual(schema.some("invariants", "I9"), ("I9",))
        with self.assertRaises(AssertionError):
            schema.every("optimizers", {"adam": 1})


if __name__ == "__main__":
    unittest.main()


class FormatDocListsTheSchema(unittest.TestCase):
    """harness/SCENARIO_FORMAT.md's tables name every kind, operation, placement kind and limit
    of the schema, with the schema's bounds: the docs cannot drift from the tables unnoticed."""

    def setUp(self):
        doc = os.path.join(support.PACKAGE_ROOT, "..", "SCENARIO_FORMAT.md")
        with open(doc, encoding="utf-8") as f:
            self.doc = f.read()

    def table_rows(self):
        return [line for line in self.doc.splitlines() if line.startswith("| `")]

    def test_every_node_kind_operation_and_placement_kind_has_a_row(self):
        rows = self.table_rows()
        for name in list(schema.NODE_KINDS) + list(schema.OPS):
            with self.subTest(name):
                self.assertTrue(any(f"`{name}`" in row.split("|")[1] for row in rows), name)
        for kind in schema.PLACEMENT_KINDS:
            self.assertIn(f'"kind": "{kind}"', self.doc)

    def test_every_operation_row_names_its_keys(self):
        rows = self.table_rows()
        for name, keys in schema.OPS.items():
            with self.subTest(name):
                row = next(r for r in rows if f"`{name}`" in r.split("|")[1])
                for key in keys.required + keys.optional:
                    self.assertIn(f"`{key}`", row.split("|")[2], f"{name}'s row lacks its key {key}")

    def test_every_limit_row_shows_the_schema_bounds(self):
        for name, (lo, hi) in schema.LIMITS.items():
            if name == "lr_exclusive":
                self.assertIn(f"open interval ({lo:g}, {hi:g})", self.doc)
                continue
            if name == "scale_inclusive":
                self.assertIn(f"closed\ninterval [{lo:g}, {hi:g}]", self.doc)
                continue
            with self.subTest(name):
                self.assertIn(f"| `{name}` | {lo}..{hi} |", self.doc)
