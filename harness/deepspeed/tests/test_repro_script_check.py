"""A repro script counts as a reproduction only when the suite ran it: REPRODUCED (exit 1) on the
tree and NOT REPRODUCED (exit 0) with --plain, on every rank of its world, within a time limit.
Stand-in scripts (no torch) play each way a script can fail that check."""

import os
import tempfile
import unittest

from zerocheck_ds.repro.script_check import check_script, verdict_line

SIGNATURE = 'I5 initialize: odd, "quoted"\nand broken é'
# A script that behaves as a repro script does: the verdict from argv and the environment.
BEHAVES = """
import os, sys
sig = {sig!r}
rank = os.environ.get("RANK", "0")
prefix = f"[rank {{rank}}] " if os.environ.get("WORLD_SIZE", "1") != "1" else ""
plain = sys.argv[1:] == ["--plain"]
reproduced = {reproduces}
print("FAILED I5 at op 0: something" if reproduced else "nothing failed")
print(prefix + (f"REPRODUCED {{sig}}: expected a, got b (op 0)" if reproduced
                else f"NOT REPRODUCED {{sig}}"), flush=True)
sys.exit(1 if reproduced else 0)
"""


class CheckScript(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def script(self, text):
        path = os.path.join(self.dir, f"s{len(os.listdir(self.dir))}.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def check(self, reproduces, world_size=1, timeout=60, environment=None):
        path = self.script(BEHAVES.format(sig=SIGNATURE, reproduces=reproduces))
        return check_script(path, SIGNATURE, world_size, environment or {}, self.dir, timeout)

    def test_reproduced_on_the_tree_and_not_with_plain_is_verified(self):
        check = self.check("not plain")
        self.assertEqual(check["verified"], True, check)
        self.assertIsNone(check["why"])
        self.assertEqual(check["tree"]["exit"], 1)
        self.assertEqual(check["tree"]["line"],
                         f"REPRODUCED {SIGNATURE}: expected a, got b (op 0)")
        self.assertEqual((check["plain"]["exit"], check["plain"]["line"]),
                         (0, f"NOT REPRODUCED {SIGNATURE}"))

    def test_on_two_ranks_one_rank_reproducing_is_enough_on_the_tree(self):
        check = self.check('not plain and rank == "1"', world_size=2)
        self.assertTrue(check["verified"], check)
        self.assertEqual(check["tree"]["ranks"], [0, 1])
        self.assertTrue(check["tree"]["line"].startswith(f"[rank 1] REPRODUCED {SIGNATURE}"))

    def test_a_script_that_reproduces_on_plain_pytorch_too_is_not_verified(self):
        check = self.check("True")
        self.assertFalse(check["verified"])
        self.assertIn("with --plain, the script exited 1", check["why"])

    def test_a_script_that_does_not_reproduce_on_the_tree_is_not_verified(self):
        check = self.check("False")
        self.assertFalse(check["verified"])
        self.assertIn("on the tree, the script exited 0", check["why"])
        self.assertIn("not REPRODUCED", check["why"])

    def test_a_traceback_is_no_verdict_and_says_why(self):
        path = self.script("import deepspeed_that_is_not_there\n")
        check = check_script(path, SIGNATURE, 1, {}, self.dir, 60)
        self.assertFalse(check["verified"])
        self.assertEqual((check["tree"]["exit"], check["tree"]["line"]), (1, None))
        self.assertIn("printed no verdict", check["why"])
        self.assertIn("ModuleNotFoundError", check["why"])

    def test_a_script_past_its_time_is_stopped_and_not_verified(self):
        path = self.script("import time\ntime.sleep(60)\n")
        check = check_script(path, SIGNATURE, 2, {}, self.dir, 1)
        self.assertFalse(check["verified"])
        self.assertIn("did not end within 1 s", check["why"])

    def test_the_environment_is_the_trees(self):
        path = self.script(BEHAVES.format(sig=SIGNATURE,
                                          reproduces='os.environ["TREE"] == "yes" and not plain'))
        self.assertTrue(check_script(path, SIGNATURE, 1, {"TREE": "yes"}, self.dir, 60)["verified"])


class VerdictLine(unittest.TestCase):
    def test_the_last_verdict_with_a_signature_holding_a_line_break(self):
        out = f"x\n[rank 0] REPRODUCED {SIGNATURE}: expected 1, got 2 (op 3)\nafter\n"
        self.assertEqual(verdict_line(out, SIGNATURE),
                         f"[rank 0] REPRODUCED {SIGNATURE}: expected 1, got 2 (op 3)")
        self.assertEqual(verdict_line(f"NOT REPRODUCED {SIGNATURE}", SIGNATURE),
                         f"NOT REPRODUCED {SIGNATURE}")
        self.assertEqual(verdict_line("NOT REPRODUCED other\n", SIGNATURE),
                         "NOT REPRODUCED other")
        self.assertIsNone(verdict_line("Traceback ...\n", SIGNATURE))


if __name__ == "__main__":
    unittest.main()
