"""repro_runtime: the functions repro scripts copy, tested here where they live, and the copier
that gives a script only what it uses."""

import io
import contextlib
import unittest

import torch

from zerocheck_ds import repro_runtime as rt
from zerocheck_ds.repro_script import code_lines


class Values(unittest.TestCase):
    def test_same_is_type_strict(self):
        self.assertTrue(rt.same(1, 1))
        self.assertFalse(rt.same(1, 1.0))
        self.assertFalse(rt.same(1, True))
        self.assertTrue(rt.same(rt.ABSENT, rt.ABSENT))
        self.assertFalse(rt.same(None, rt.ABSENT))
        self.assertTrue(rt.same([1, "a"], [1, "a"]))
        self.assertFalse(rt.same([1], (1,)))
        t = torch.tensor([1.0, 2.0])
        self.assertTrue(rt.same(t, t.clone()))
        self.assertFalse(rt.same(t, t.double()))
        self.assertFalse(rt.same(t, torch.nn.Parameter(t.clone())))

    def test_show_is_one_line_and_never_reads_a_large_tensor(self):
        self.assertEqual(rt.show(torch.tensor([1.0])), "tensor([1.0], dtype=torch.float32)")
        self.assertEqual(rt.show(torch.zeros(100)),
                         "Tensor(shape=[100], dtype=torch.float32, device=cpu)")
        self.assertEqual(len(rt.show("x" * 500)), 203)

        class Broken:
            def __repr__(self):
                raise ValueError

        self.assertEqual(rt.show(Broken()), "<repr failed: ValueError>")


class Checks(unittest.TestCase):
    def setUp(self):
        rt.failures.clear()
        rt._reported.clear()
        rt.model = torch.nn.Sequential(torch.nn.Linear(2, 2))
        rt.user_attrs = {("0", "", "id"): 5}
        self.addCleanup(setattr, rt, "user_attrs", {})

    def run_check(self, check):
        with contextlib.redirect_stdout(io.StringIO()) as out:
            check(3)
        return out.getvalue()

    def test_an_attribute_overwritten_is_an_I1_failure_once(self):
        rt.model[0].id = 5
        self.assertEqual(self.run_check(rt.check_user_attrs), "")
        rt.model[0].id = 7
        self.assertIn("FAILED I1 at op 3: module '0' attribute 'id': expected 5, got 7",
                      self.run_check(rt.check_user_attrs))
        self.assertEqual(self.run_check(rt.check_user_attrs), "")  # reported once
        self.assertEqual(rt.failures, [("I1", "id", "5", "7",
                                        "op 3: module '0' attribute 'id': expected 5, got 7")])

    def test_owner_by_attr_follows_the_users_value(self):
        rt.model[0].id = 5
        rt.placed, rt.PLACEMENT_ATTR, rt.SCENARIO_WORLD_SIZE = {"0": rt.model[0]}, "id", 2
        self.addCleanup(setattr, rt, "placed", {})
        self.assertEqual(self.run_check(rt.check_owner_by_attr), "")
        rt.model[0].id = 6
        self.assertIn("owner rank 1 (user's id=5) became 0", self.run_check(rt.check_owner_by_attr))


class Verdict(unittest.TestCase):
    def setUp(self):
        rt.failures.clear()
        rt._reported.clear()
        rt.SIGNATURE = "sig"
        self.addCleanup(setattr, rt, "SIGNATURE", "")
        with contextlib.redirect_stdout(io.StringIO()):
            rt.fail("op", 1, None, "no exception", "KeyError", "step raised KeyError: 'x'")
            rt.fail("I1", 2, "id", "5", "1", "module '0' attribute 'id': expected 5, got 1")

    def verdict(self, *target, **fields):
        with contextlib.redirect_stdout(io.StringIO()) as out, self.assertRaises(SystemExit) as e:
            rt.verdict(*target, **fields)
        return e.exception.code, out.getvalue()

    def test_the_first_failure_like_the_target_is_reproduced_with_exit_1(self):
        self.assertEqual(self.verdict("I1", attribute="id"), (1, "REPRODUCED sig: expected 5, got "
                         "1 (op 2: module '0' attribute 'id': expected 5, got 1)\n"))
        self.assertEqual(self.verdict("op", actual="KeyError")[0], 1)

    def test_anything_else_is_not_reproduced_with_exit_0(self):
        for target, fields in ((("I1",), {"attribute": "ds_id"}), (("op",), {"actual": "Error"}),
                               (("I2",), {}), (("I1",), {"expected_start": "6"})):
            self.assertEqual(self.verdict(*target, **fields), (0, "NOT REPRODUCED sig\n"))


class Stand_ins(unittest.TestCase):
    def test_plain_forms_hold_the_rules_for_values_without_tensors_or_lists(self):
        self.assertFalse(rt.same_plain(1, True))
        self.assertFalse(rt.same_plain(None, rt.ABSENT))
        self.assertTrue(rt.same_plain("a", "a"))
        self.assertEqual(rt.show_plain(torch.zeros(2)),
                         "Tensor(shape=[2], dtype=torch.float32, device=cpu)")
        self.assertEqual(rt.show_plain(rt.ABSENT), "<absent>")

    def test_the_plain_engine_is_the_model(self):
        module = torch.nn.Linear(2, 2)
        self.assertEqual(rt.plain_initialize(module, "opt", {}), (module, "opt", None, None))


class Copier(unittest.TestCase):
    def test_a_function_comes_with_what_it_uses_and_nothing_else(self):
        text = rt.source(["check_user_attrs"])
        for needed in ("def check_user_attrs", "def same", "def show", "def fail(", "ABSENT = ",
                       "ERRORS = "):
            self.assertIn(needed, text)
        for not_needed in ("def check_owner_by_attr", "def op_failed", "def skipped",
                           "model = None", "PREFIX = "):
            self.assertNotIn(not_needed, text)
        namespace = {"torch": torch, "PREFIX": ""}
        exec(compile(text, "copied", "exec"), namespace)  # stands alone with the script's globals
        self.assertTrue(namespace["same"](1, 1))

    def test_an_unknown_name_is_refused(self):
        with self.assertRaisesRegex(KeyError, "defines no 'nothing'"):
            rt.source(["nothing"])


class CodeLines(unittest.TestCase):
    def test_comments_blank_lines_and_docstrings_are_not_code(self):
        text = ('"""Module\ndoc."""\n\n# a comment\nimport os\n\n\ndef f(x):\n'
                '    """Doc."""\n    return (x +\n            1)  # trailing\n')
        self.assertEqual(code_lines(text), 4)  # import, def, and the two lines of the return


if __name__ == "__main__":
    unittest.main()
