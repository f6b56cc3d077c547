"""The keys of I4 and I9 root causes (findings/root_causes.py): the rule or field, and the upstream
function that last wrote it (numerics.py reads it from the audit of provenance.py), by hand.

The planted DeepSpeed faults of harness/tests/upstream_faults_test.py show the same on the real
engine: a rank whose persistent parameters were not gathered after a step is not the Gloo
all_gather race's row, and a release that keeps the gathered data is not one that put the data back.
"""

import unittest

from zerocheck_ds.findings import root_causes

GATHER = "deepspeed/runtime/zero/partition_parameters.py _allgather_params_coalesced()"
FETCH = "deepspeed/runtime/zero/partition_parameters.py wait()"


def i9(writers, field="whole_copy", op="step"):
    origin = None if writers is None else {"action": "last written", "writers": writers}
    return {"invariant": "I9", "op": op, "attribute": field, "origin": origin,
            "signature": f"I9 {op}: ranks disagree on {field}"}


def i4(writer, rule="released but holding data", op="backward"):
    origin = None if writer is None else {"action": "left", "attribute": "data", "writer": writer}
    return {"invariant": "I4", "op": op, "attribute": rule, "origin": origin,
            "signature": f"I4 {op}: {rule} on Linear parameter"}


class I9Keys(unittest.TestCase):
    def test_the_field_and_the_function_every_rank_names(self):
        self.assertEqual(root_causes.cause_title(i9([GATHER, GATHER])),
                         f"I9 step: whole_copy, last written by {GATHER}")

    def test_ranks_whose_values_came_other_ways_are_another_cause_whichever_rank(self):
        one = root_causes.cause_title(i9([GATHER, FETCH]))
        self.assertEqual(one, root_causes.cause_title(i9([FETCH, GATHER])))
        self.assertEqual(one, f"I9 step: whole_copy, last written by {GATHER} on some ranks and "
                              f"{FETCH} on others")
        self.assertNotEqual(one, root_causes.cause_title(i9([GATHER, GATHER])))
        self.assertIn("no upstream code", root_causes.cause_title(i9([GATHER, None])))

    def test_without_a_writer_the_field_alone(self):
        self.assertEqual(root_causes.cause_title(i9(None)), "I9 step: whole_copy")
        self.assertEqual(root_causes.cause_title(i9([None, None])), "I9 step: whole_copy")

    def test_the_gloo_race_rows_hold_the_keys_the_race_gives(self):
        table = root_causes.known_upstream()
        for op in ("step", "save"):
            self.assertIn(root_causes.cause_title(i9([GATHER, GATHER], op=op)), table)
        self.assertNotIn("I9 step: whole_copy", table)


class I4Keys(unittest.TestCase):
    def test_the_rule_and_who_last_wrote_the_storage(self):
        kept = root_causes.cause_title(i4("deepspeed/runtime/zero/parameter_offload.py "
                                          "post_sub_module_backward_function()"))
        gathered = root_causes.cause_title(i4(FETCH))
        self.assertEqual(gathered, f"I4 backward: released but holding data, its data last "
                                   f"written by {FETCH}")
        self.assertNotEqual(kept, gathered)
        self.assertEqual(root_causes.cause_title(i4(None)), "I4 backward: released but holding data")


if __name__ == "__main__":
    unittest.main()
