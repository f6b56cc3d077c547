"""Issue drafts: the minimal script inline whatever its length, and where no
bisection ran, the exact bisect command that finds the first bad commit."""

import os
import tempfile
import unittest

from . import support  # noqa: F401  (puts zerocheck_ds on the path)

from zerocheck_ds.findings.issue_drafts import draft

SUMMARY = {"adapter": "deepspeed", "world_size": 2, "stage": 3,
           "versions": {"engine": "0.14.5", "torch": "1.13.0", "python": "3.11.2"}}


def cause(**fields):
    found = {"example": {"invariant": "I1", "attribute": "id", "expected": 5, "actual": 1,
                         "message": "module '0' attribute 'id': expected 5, got 1"},
             "location": None, "signatures": ["I1 id"], "count": 1, "scenarios": ["s"],
             "replay_command": "zerocheck upstream ..."}
    found.update(fields)
    return found


class Drafts(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)
        self.script = os.path.join(self._tmp.name, "repro", "s.py")
        os.makedirs(os.path.dirname(self.script))
        with open(self.script, "w", encoding="utf-8") as f:
            f.write("print('line')\n" * 500)  # longer than any budget: inlined all the same
        self.minimal = {"repro": self.script, "repro_command": f"python3 {self.script}",
                        "after": {"world_size": 2}}

    def test_the_script_is_inline_and_the_bisect_command_is_filled_in(self):
        text = draft(cause(minimal=self.minimal), SUMMARY)
        self.assertEqual(text.count("print('line')"), 500)
        self.assertIn(f"zerocheck upstream bisect --repo <DeepSpeed checkout> --good <rev> --bad "
                      f"v0.14.5 --repro {self.script} --world 2", text)
        with_commit = dict(SUMMARY, versions=dict(SUMMARY["versions"], commit="eb07d41f9"))
        self.assertIn("--bad eb07d41f9 --repro", draft(cause(minimal=self.minimal), with_commit))

    def test_a_known_first_bad_commit_replaces_the_command(self):
        text = draft(cause(minimal=self.minimal, first_bad_commit="abc123 zero: number modules"),
                     SUMMARY)
        first_bad = text.split("## First bad commit", 1)[1].split("##", 1)[0]
        self.assertIn("abc123 zero: number modules", first_bad)
        self.assertNotIn("zerocheck upstream bisect", first_bad)

    def test_without_a_script_it_says_how_to_get_one(self):
        self.assertIn("--shrink", draft(cause(), SUMMARY))


if __name__ == "__main__":
    unittest.main()
