"""Signatures: the same bug gives the same string whatever varies between runs and versions."""

import unittest

from . import support  # noqa: F401 - puts zerocheck_ds on the path
from zerocheck_ds.findings.signatures import normalise_exception, signature, slug


def finding(**fields):
    base = {"invariant": "I1", "op_index": 0, "op": "initialize", "module_path": "1.experts.0",
            "param": "", "attribute": "id", "expected": 0, "actual": 2, "exception": None,
            "message": "", "node_kind": "Expert", "ranks": [0, 1]}
    return dict(base, **fields)


class Signatures(unittest.TestCase):
    def test_numbers_addresses_and_paths_are_normalised(self):
        a = normalise_exception("KeyError: 140234 at 0x7f3a2b1c in /usr/lib/python3/dist-packages/x.py")
        b = normalise_exception("KeyError: 7 at 0xdeadbeef in /opt/ds/deepspeed/runtime/zero/y.py")
        self.assertEqual(a, b)
        self.assertEqual(a, "KeyError: N at ADDR in PATH")

    def test_shapes_of_any_rank_are_one_shape(self):
        self.assertEqual(normalise_exception("AssertionError: {'shape': (0,), 'ds_shape': (2, 0, 3)}"),
                         normalise_exception("AssertionError: {'shape': (4, 0), 'ds_shape': (0,)}"))

    def test_a_traceback_is_judged_by_its_last_line(self):
        text = 'Traceback (most recent call last):\n  File "/a/b.py", line 3\nIndexError: list index out of range'
        self.assertEqual(normalise_exception(text), "IndexError: list index out of range")

    def test_names_in_messages_are_kept(self):
        self.assertEqual(normalise_exception("AttributeError: 'int' object has no attribute 'apply'"),
                         "AttributeError: 'int' object has no attribute 'apply'")

    def test_scenario_specific_details_do_not_change_the_signature(self):
        one = signature(finding())
        other = signature(finding(op_index=7, module_path="0.experts.41", expected=41, actual=84,
                                  ranks=[1], message="different"))
        self.assertEqual(one, other)
        self.assertEqual(one, "I1 initialize: attribute 'id' on Expert module not the user's")

    def test_what_identifies_the_bug_does(self):
        base = signature(finding())
        for change in ({"attribute": "ds_id"}, {"op": "forward"}, {"node_kind": "Linear"},
                       {"param": "linear.weight"}, {"invariant": "I2"}):
            self.assertNotEqual(signature(finding(**change)), base, change)

    def test_crash_hang_and_refusals(self):
        self.assertEqual(signature(finding(invariant="crash", op="forward", actual="SIGSEGV")),
                         "crash in forward: SIGSEGV")
        self.assertEqual(signature(finding(invariant="hang", op="backward", actual=None)),
                         "hang in backward")
        wrong = finding(invariant="I5", attribute=None, exception="IndexError: list index 3 out of range")
        self.assertEqual(signature(wrong),
                         "I5 initialize: repeated initialize failed, not refused: IndexError: list index N out of range")

    def test_an_invalid_config_is_not_called_a_repeated_initialize(self):
        config = dict(invariant="I5", attribute="invalid config", exception=None)
        self.assertEqual(signature(finding(**config, actual="accepted")),
                         "I5 initialize: an invalid config accepted")
        self.assertEqual(signature(finding(**dict(config, exception="KeyError: 'x'"))),
                         "I5 initialize: an invalid config failed, not as a configuration error: "
                         "KeyError: 'x'")
        self.assertEqual(signature(finding(**config, actual=["module '' attribute "
                                                             "'_forward_pre_hooks': changed"])),
                         "I5 initialize: an invalid config changed the model or optimizers")

    def test_slugs_are_file_names_and_distinct(self):
        a, b = slug("I1 initialize: attribute 'id'"), slug("I1 initialize: attribute 'ID'")
        self.assertNotEqual(a, b)
        self.assertRegex(a, r"^[A-Za-z0-9-]+$")


if __name__ == "__main__":
    unittest.main()
