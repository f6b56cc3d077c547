"""Issue drafts: one per bug (root causes that KNOWN_UPSTREAM.md calls one bug merged), titled in
plain words, the analysis its "why", the script inline only when the suite verified it, no path of
the machine that wrote it, and a first bad commit only when a bisection ran."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from . import support

from zerocheck_ds.findings.issue_drafts import bug_table, draft, draft_path, write_all

SUMMARY = {"adapter": "deepspeed", "world_size": 2, "stage": 3, "deepspeed_tree": "/work/ds",
           "versions": {"engine": "0.14.5", "torch": "1.13.0", "python": "3.11.2"}}
STALE = "ZeRO-3: a parameter that gets no gradient in a step is updated with its previous gradient"
TABLE = {"cause A": {"bug": STALE, "why": "Stale gradient: the buffer is never cleared.",
                     "verdict": "DeepSpeed bug"},
         "cause B": {"bug": STALE, "why": "The same buffer, seen by the loss.",
                     "verdict": "DeepSpeed bug"}}
MACHINE_PATHS = ("/work", "/tmp", "/home", "/usr")


def cause(title="cause A", **fields):
    found = {"id": title.replace(" ", "-"), "title": title,
             "example": {"invariant": "I3", "expected": 0.25, "actual": 0.2321,
                         "message": "step 2: value of 'a.weight' differs: expected 0.25, got "
                                    "0.2321 (raised at /work/shared/deepspeed/v0.14.5/deepspeed/"
                                    "runtime/zero/stage3.py:947)",
                         "exception": 'File "/usr/lib/python3/dist-packages/torch/nn/module.py",'
                                      ' line 1 in /tmp/x/run'},
             "location": None, "signatures": [f"I3 step: {title}"], "count": 1,
             "scenarios": ["s"], "replay_command": "zerocheck upstream --scenarios /tmp/s.json"}
    found.update(fields)
    return found


class Drafts(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)
        self.script = os.path.join(self._tmp.name, "repro", "s.py")
        os.makedirs(os.path.dirname(self.script))
        with open(self.script, "w", encoding="utf-8") as f:
            f.write("#!/usr/bin/env python3\n" + "print('line')\n" * 500)  # inlined whatever its length
        self.scenario = os.path.join(self._tmp.name, "minimal.json")
        with open(self.scenario, "w", encoding="utf-8") as f:
            json.dump({"world_size": 2, "ops": [{"op": "step"}]}, f)

    def minimal(self, verified, why=None):
        return {"repro": self.script, "scenario": self.scenario, "reproducible": True,
                "repro_command": f"cd /work/x && python3 {self.script}",
                "after": {"world_size": 2},
                "script_check": {"tree": {"printed": "REPRODUCED"},
                                 "plain": {"printed": "NOT REPRODUCED"},
                                 "verified": verified, "why": why}}

    def test_two_root_causes_of_one_bug_give_one_draft_titled_in_plain_words(self):
        summary = dict(SUMMARY, root_causes=[cause("cause A"), cause("cause B"), cause("cause C")])
        paths = write_all(summary, self._tmp.name, TABLE)
        self.assertEqual(len(paths), 2)  # A and B are one bug; C, untriaged, is its own
        self.assertEqual(paths[0], draft_path(self._tmp.name, cause("cause B"), TABLE))
        with open(paths[0], encoding="utf-8") as f:
            text = f.read()
        self.assertEqual(text.splitlines()[0], f"# {STALE}")
        for needle in ("`cause A`", "`cause B`", "Stale gradient: the buffer is never cleared.",
                       "The same buffer, seen by the loss.", "expected: `0.25`",
                       "actual: `0.2321`", "DeepSpeed 0.14.5", "torch 1.13.0, Python 3.11.2"):
            self.assertIn(needle, text)
        self.assertNotIn("I3 step", text.splitlines()[0])  # not an internal signature

    def test_an_untriaged_bug_is_titled_in_plain_words_not_by_its_signature(self):
        raised = cause("op: raised in deepspeed/runtime/engine.py _forward_prologue()",
                       location={"file": "deepspeed/runtime/engine.py",
                                 "function": "_forward_prologue", "lines": [2766]},
                       example={"invariant": "op", "op": "forward", "message": "m",
                                "exception": "Traceback (most recent call last):\n  ...\n"
                                             "AttributeError: 'DeepSpeedEngine' object has no "
                                             "attribute 'engine_timers'"})
        located = cause("I3 step: the fp32 master after the optimizer step first differs",
                        example={"invariant": "I3", "op": "step", "message": "m",
                                 "origin": {"action": "located", "op": "step",
                                            "quantity": "the fp32 master after the optimizer "
                                                        "step",
                                            "file": "deepspeed/runtime/zero/stage3.py",
                                            "function": "_optimizer_step"}})
        i9 = cause("I9 step: global_steps", example={"invariant": "I9", "op": "step",
                                                     "attribute": "global_steps", "message": "m"})
        titles = [draft([c], SUMMARY, {}).splitlines()[0] for c in (raised, located, i9)]
        self.assertEqual(titles, [
            "# ZeRO-3: `forward` fails with AttributeError in `_forward_prologue()`",
            "# ZeRO-3: after a `step`, the fp32 master after the optimizer step differs from "
            "plain PyTorch's on the same data (`_optimizer_step()`)",
            "# ZeRO-3's ranks disagree on what they hold (at `step`: global_steps)"])
        self.assertEqual(draft([i9], dict(SUMMARY, stage=2), {}).splitlines()[0],
                         "# ZeRO-2's ranks disagree on what they hold (at `step`: global_steps)")

    def test_a_numeric_finding_gives_expected_and_actual_as_numbers_and_where_it_parts(self):
        located = cause(example={
            "invariant": "I3", "op_index": 7, "op": "step", "module_path": "1.experts.0.linear",
            "param": "weight", "attribute": "value", "expected": "the dense twin's value",
            "actual": {"differing": 16, "of": 16, "first_index": 0, "expected": 0.4756732881,
                       "actual": 0.4687009155, "max_abs": 0.00746895, "max_rel": 0.1143484},
            "message": "m", "origin": {"action": "located", "op": "step",
                                       "quantity": "the gradient handed to the optimizer",
                                       "file": "deepspeed/runtime/zero/stage3.py",
                                       "function": "_prepare_sub_group"}})
        text = draft([located], SUMMARY, TABLE)
        for needle in ("`1.experts.0.linear.weight` element [0] after op 7 (step):",
                       "  - expected: `0.4756732881` (the dense twin's value)",
                       "  - actual: `0.4687009155` (16 of 16 elements differ; max abs 0.00747, "
                       "max rel 0.114)",
                       "(The suite compares with the dense twin: one copy of the model, trained "
                       "with plain PyTorch",
                       "Inside the `step`, the first quantity where DeepSpeed and the dense twin "
                       "part is the gradient handed to the optimizer, produced by "
                       "`deepspeed/runtime/zero/stage3.py`, `_prepare_sub_group()`"):
            self.assertIn(needle, text)
        self.assertNotIn("No DeepSpeed frame is named", text)

    def test_where_is_the_first_root_cause_located_in_deepspeeds_code(self):
        unlocated = cause("cause A", example={"invariant": "I5", "op": "initialize",
                                              "message": "m"})
        raised = cause("cause B", location={"file": "deepspeed/runtime/zero/stage3.py",
                                            "function": "__init__", "lines": [149]},
                       example={"invariant": "I5", "op": "initialize", "message": "m",
                                "origin": {"action": "raised", "line": 149}})
        raised["example"].update(expected="AlreadyInitialized", actual="IndexError")
        text = draft([unlocated, raised], SUMMARY, TABLE)
        self.assertIn("expected: `\"refused with an error saying 'already been initialized'\"`",
                      text)  # not the suite's own name for it
        where = text.split("Where:")[1]
        self.assertIn("`deepspeed/runtime/zero/stage3.py`, `__init__()` raises it (line 149)",
                      where)
        self.assertNotIn("No DeepSpeed frame is named", where)

    def test_the_analysis_leaves_out_what_points_into_this_project(self):
        why = ("Stale gradient. The buffer is never cleared (stage3.py `partition_grads`). "
               "Repro: `catalogue/zero3_stale_gradient/` (report and script); scenario "
               "`harness/tests/scenarios/SOME_FOLDER/x.json`, which both upstream ctests "
               "assert. No upstream issue found (searched 2026-12; the queries are in "
               "`catalogue/zero3_stale_gradient/REPORT.md`).")
        table = {"cause A": dict(TABLE["cause A"], why=why)}
        analysis = draft([cause()], SUMMARY, table).split("## Analysis")[1].split("Where:")[0]
        self.assertEqual(analysis.strip(), "Stale gradient. The buffer is never cleared "
                                           "(stage3.py `partition_grads`).")

    def test_the_script_inlined_is_the_one_of_the_bugs_first_signature(self):
        other = os.path.join(self._tmp.name, "repro", "other.py")
        with open(other, "w", encoding="utf-8") as f:
            f.write("print('other')\n")
        first = cause(signatures=["I3 step: value", "I3 forward: loss"])
        summary = dict(SUMMARY, signatures=[  # the summary's order: most scenarios first
            {"signature": "I3 forward: loss", "minimal": dict(self.minimal(True), repro=other)},
            {"signature": "I3 step: value", "minimal": self.minimal(True)}])
        text = draft([first], summary, TABLE)
        self.assertIn("print('line')", text)
        self.assertNotIn("print('other')", text)

    def test_no_draft_names_a_path_of_the_machine_or_a_command_of_ours(self):
        for minimal in (self.minimal(True), self.minimal(False, "plain: REPRODUCED in /tmp/r")):
            text = draft([cause(minimal=minimal)], SUMMARY, TABLE)
            for path in MACHINE_PATHS:
                self.assertNotIn(path, text)
            self.assertNotIn("zerocheck upstream", text)
            self.assertNotIn("shims", text)
            self.assertIn("deepspeed/runtime/zero/stage3.py:947", text)  # the package's own path

    def test_a_verified_script_is_inline(self):
        text = draft([cause(minimal=self.minimal(True))], SUMMARY, TABLE)
        self.assertEqual(text.count("print('line')"), 500)
        self.assertIn("python3 s.py", text)
        self.assertNotIn("No verified script", text)

    def test_an_unverified_script_is_not_inline_and_the_draft_says_why(self):
        for minimal, why in ((self.minimal(False, "with --plain it printed REPRODUCED"),
                              "with --plain it printed REPRODUCED"),
                             (dict(self.minimal(True), script_check=None),
                              "did not run the script"),
                             ({k: v for k, v in self.minimal(True).items()
                               if k != "script_check"}, "did not run the script")):
            text = draft([cause(minimal=minimal)], SUMMARY, TABLE)
            self.assertNotIn("print('line')", text)
            self.assertIn("No verified script", text)
            self.assertIn(why, text)
            self.assertIn('"op": "step"', text)  # the minimal scenario instead

    def test_where_the_suite_wrote_no_script_the_draft_gives_its_reason(self):
        why = "an initialize given an invalid config is written only by the straight-line form"
        minimal = {"scenario": self.scenario, "reproducible": True, "repro": None,
                   "script_error": None, "script_check": None, "no_script": why}
        text = draft([cause(minimal=minimal)], SUMMARY, TABLE)
        self.assertIn(f"No verified script: the suite wrote no standalone script for this "
                      f"finding: {why}.", text)
        broken = dict(minimal, no_script=None, script_error="SyntaxError: bad")
        self.assertIn("the script writer failed (SyntaxError: bad)",
                      draft([cause(minimal=broken)], SUMMARY, TABLE))

    def test_a_first_bad_commit_only_when_a_bisection_ran(self):
        self.assertNotIn("first bad commit", draft([cause()], SUMMARY, TABLE).lower())
        text = draft([cause(first_bad_commit="abc123 zero: number modules")], SUMMARY, TABLE)
        self.assertIn("## First bad commit\n\nabc123 zero: number modules", text)

    def test_a_commit_only_as_the_summary_records_it(self):
        self.assertNotIn("commit", draft([cause()], SUMMARY, TABLE).split("## Reproduce")[0]
                         .split("## Environment")[1])
        with_commit = dict(SUMMARY, versions=dict(SUMMARY["versions"], commit="eb07d41f9"))
        self.assertIn("DeepSpeed 0.14.5 (commit eb07d41f9)", draft([cause()], with_commit, TABLE))

    def test_a_draft_that_cannot_be_written_costs_only_that_draft(self):
        broken = cause("cause C", example=None)  # no example: the writer raises on it
        summary = dict(SUMMARY, root_causes=[broken, cause("cause A")])
        paths = write_all(summary, self._tmp.name, TABLE)
        self.assertEqual(len(paths), 2)
        with open(paths[0], encoding="utf-8") as f:
            self.assertIn("could not be written", f.read())


@unittest.skipIf(shutil.which("git") is None, "no git on this machine")
class CommitOfTheTree(unittest.TestCase):
    """The versions a draft names hold the commit of a --deepspeed-tree that is a checkout of its
    own (a source checkout's DeepSpeed reports no git hash itself)."""

    def test_a_tree_that_is_its_own_checkout_has_its_commit_in_the_summary(self):
        with tempfile.TemporaryDirectory() as tmp:
            tree = os.path.join(tmp, "DeepSpeed")
            shutil.copytree(support.STUB_DEEPSPEED, tree,
                            ignore=shutil.ignore_patterns("__pycache__"))
            for arguments in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "one"]):
                subprocess.run(["git", "-C", tree, "-c", "user.name=t", "-c", "user.email=t@t",
                                *arguments], check=True, capture_output=True)
            head = subprocess.run(["git", "-C", tree, "rev-parse", "HEAD"], check=True,
                                  capture_output=True, text=True).stdout.strip()
            out = os.path.join(tmp, "out")
            run = subprocess.run(
                [sys.executable, "-m", "zerocheck_ds", "suite", "--scenarios",
                 support.good("name_collisions"), "--out", out, "--world", "1",
                 "--deepspeed-tree", tree, "--no-control"],
                env=support.cli_env(), cwd=support.TESTS, capture_output=True, text=True,
                timeout=300)
            self.assertIn(run.returncode, (0, 1), run.stdout + run.stderr)
            with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
                versions = json.load(f)["versions"]
        self.assertEqual(versions.get("commit"), head[:12], versions)


class KnownUpstreamBugs(unittest.TestCase):
    """The bug column of the real KNOWN_UPSTREAM.md: the rows one bug shares, the why read from it."""

    def test_rows_that_are_one_bug_share_its_title(self):
        table = bug_table()
        self.assertGreater(len(table), 30)
        self.assertTrue(all(row["bug"] and row["why"] for row in table.values()))
        reinit = {row["bug"] for title, row in table.items() if "stage3.py __init__()" in title
                  or title == "I5 initialize: repeated initialize accepted"}
        self.assertEqual(len(reinit), 1)
        gloo = {table[t]["bug"] for t in table if t.startswith(("I9 step: whole_copy",
                                                                 "I9 save: whole_copy"))}
        self.assertEqual(len(gloo), 1)
        self.assertIn(STALE, {row["bug"] for row in table.values()})
        self.assertFalse([row["bug"] for row in table.values() if ".py" in row["bug"]])  # plain


if __name__ == "__main__":
    unittest.main()
