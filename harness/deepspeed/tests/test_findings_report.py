"""What a maintainer gets from a suite run: root causes with the code that wrote,
their issue drafts, the control that sets the replay's own limits apart, what was not checked,
and a --json stdout that holds one document whatever the environment prints."""

import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stderr
from unittest import mock

from . import support

from zerocheck_ds.suite import suite
from zerocheck_ds.findings import report

from zerocheck_ds.findings import summary_schema
SITE_NOISE = "Setting ds_accelerator to cpu (override)"
WRITER = ("zerocheck_ds/engines/adapters.py", "_number_modules_like_0_15_4")


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class FindingsReport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # One run of the faulty engine (it clobbers `id`, accepts a repeated initialize), with a
        # sitecustomize that prints on stdout at import, and a rank that dies in one scenario on
        # any engine (so the control, on the pass-through engine, dies too).
        cls._tmp = tempfile.TemporaryDirectory()
        site = os.path.join(cls._tmp.name, "site")
        os.makedirs(site)
        with open(os.path.join(site, "sitecustomize.py"), "w", encoding="utf-8") as f:
            f.write(f"print({SITE_NOISE!r})\n")
        cls.out = os.path.join(cls._tmp.name, "out")
        # As `zerocheck upstream --json` starts it (harness/tools/upstream.cc): stdout is stderr
        # before Python starts, the document goes to a copy of the real stdout (--json-fd).
        # PYTHONUNBUFFERED: the sitecustomize's text is written at once, never held in a buffer.
        read_end, write_end = os.pipe()
        with os.fdopen(read_end, encoding="utf-8") as document:
            process = subprocess.Popen(
                [sys.executable, "-m", "zerocheck_ds", "suite", "--scenarios", support.GOOD,
                 "--out", cls.out, "--world", "2", "--adapter", "faulty", "--json",
                 "--json-fd", str(write_end)],
                env=support.cli_env([site], ZEROCHECK_DS_INJECT="crash:reinit_submodule_map:1",
                                    PYTHONUNBUFFERED="1"),
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=[write_end],
                cwd=support.TESTS, text=True)
            os.close(write_end)
            cls.stdout = document.read()
            cls.stderr = process.communicate(timeout=300)[0]
        cls.returncode = process.returncode
        cls.summary = read_json(os.path.join(cls.out, "summary.json"))

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def test_stdout_is_one_json_document_of_the_checked_schema(self):
        self.assertEqual(self.returncode, 1, self.stderr[-3000:])
        document = json.loads(self.stdout)  # nothing before or after it
        self.assertEqual(document, self.summary)
        self.assertIn(SITE_NOISE, self.stderr)  # the environment's text went to stderr
        self.assertEqual(summary_schema.errors(document), [])
        broken = dict(document, root_causes=[{"title": 1}])
        self.assertTrue(any("root_causes[0]" in e for e in summary_schema.errors(broken)))

    def test_one_root_cause_per_writer_with_its_signatures_and_lines(self):
        causes = {c["title"]: c for c in self.summary["root_causes"]}
        i1 = causes[f"I1: written by {WRITER[0]} {WRITER[1]}()"]
        self.assertEqual((i1["location"]["file"], i1["location"]["function"]), WRITER)
        self.assertEqual(len(i1["location"]["lines"]), 1)
        self.assertGreaterEqual(len(i1["signatures"]), 3)  # id on Expert, Linear, Offset, ...
        self.assertTrue(all(s.startswith("I1 initialize: attribute 'id'") for s in i1["signatures"]))
        upstream = {s["signature"] for s in self.summary["signatures"]} - {
            lim["signature"] for lim in self.summary["limits"]}
        self.assertEqual(upstream, {s for c in causes.values() for s in c["signatures"]})
        self.assertLess(len(causes), len(upstream))
        for entry in self.summary["scenarios"]:
            self.assertTrue(set(entry["root_causes"]) <= set(causes), entry)

    def test_every_root_cause_has_an_issue_draft_linked_from_the_report(self):
        with open(os.path.join(self.out, "report.md"), encoding="utf-8") as f:
            report = f.read()
        self.assertLess(report.index("## Root causes"), report.index("## Findings by signature"))
        for cause in self.summary["root_causes"]:  # one draft per bug: its causes share it
            draft = cause["draft"]
            self.assertEqual(os.path.dirname(draft), os.path.join(self.out, "issues"))
            self.assertTrue(os.path.exists(draft), draft)
            self.assertIn(f"(issues/{os.path.basename(draft)})", report)
        i1 = next(c for c in self.summary["root_causes"] if c["title"].startswith("I1:"))
        with open(i1["draft"], encoding="utf-8") as f:
            text = f.read()
        for needle in ("## Environment", "torch ", "Python ", "world size 2", "ZeRO stage 3",
                       "## Expected and actual", f"`{WRITER[0]}`, `{WRITER[1]}()` writes it",
                       "## Reproduce", "## Control", "## Related upstream issues"):
            self.assertIn(needle, text)

    def test_what_the_control_also_shows_is_a_limit_not_an_upstream_finding(self):
        crash = "crash in initialize: SIGSEGV"
        limits = {lim["signature"]: lim for lim in self.summary["limits"]}
        self.assertEqual(list(limits), [crash])
        self.assertIn("plain PyTorch (passthrough engine) fails the same way",
                      limits[crash]["reason"])
        self.assertFalse(any(crash in c["signatures"] for c in self.summary["root_causes"]))
        controls = {g["signature"]: g["control"] for g in self.summary["signatures"]}
        self.assertTrue(all(not c["also_without_engine"]
                            for sig, c in controls.items() if sig != crash))
        self.assertEqual(len(controls), len(self.summary["signatures"]))  # each one confirmed

    def test_skipped_operations_are_counted_by_reason(self):
        skipped = sum(len(read_json(os.path.join(self.out, "verdicts", n))["skipped"])
                      for n in os.listdir(os.path.join(self.out, "verdicts")))
        counted = self.summary["not_checked"]["operations"]
        self.assertGreater(skipped, 0)
        self.assertEqual(sum(counted.values()), skipped)
        for key in counted:  # "<op>: <reason>", the reason as the verdicts give it
            op, _, reason = key.partition(": ")
            self.assertTrue(op and reason, key)
        self.assertEqual(set(self.summary["not_checked"]["checks"]), {"I3", "I4", "I6", "I9", "I10", "I11"})

    def test_coverage_counts_only_names_really_written(self):
        # The fixtures ask for `forward` on a module and `data` on a parameter: names Python or
        # torch reserve, refused every time, so never covered.
        modules, params = (self.summary["coverage"][k] for k in ("modules", "parameters"))
        self.assertIn("forward", modules["never_written"])
        self.assertNotIn("id", modules["never_written"])
        self.assertEqual(modules["covered"] + len(modules["never_written"]), modules["asked"])
        self.assertEqual(params["covered"] + len(params["never_written"]), params["asked"])
        self.assertTrue(params["never_written"])


class ScriptStatus(unittest.TestCase):
    """report.md calls a script verified only when the suite ran it and saw REPRODUCED on the
    tree and NOT REPRODUCED with --plain; any other is named unverified, with the reason."""

    def cause(self, check):
        minimal = {"repro": "OUT/repro/s.py", "reproducible": True, "script_check": check}
        return {"title": "I5: raised in deepspeed/runtime/engine.py _forward_prologue()",
                "location": None, "count": 1, "scenarios": ["s"], "signatures": ["I5 x"],
                "example": {"message": "m"}, "triage": None, "draft": "OUT/issues/b.md",
                "minimal": minimal}

    def test_a_verified_script_is_called_verified(self):
        text = "\n".join(report._cause_markdown(self.cause(
            {"tree": {}, "plain": {}, "verified": True, "why": None}), "OUT"))
        self.assertIn("- standalone script, verified (REPRODUCED on the tree, NOT REPRODUCED "
                      "with --plain): `OUT/repro/s.py`", text)

    def test_an_unverified_script_is_named_so_with_the_reason(self):
        why = "with --plain, the script exited 1 and printed 'REPRODUCED I5 x', not NOT REPRODUCED"
        for check, reason in (({"tree": {}, "plain": {}, "verified": False, "why": why}, why),
                              (None, "the suite did not run it")):
            text = "\n".join(report._cause_markdown(self.cause(check), "OUT"))
            self.assertIn(f"- script NOT verified ({reason}); not a reproduction until it is: "
                          f"`OUT/repro/s.py`", text)
            self.assertNotIn("standalone script", text)

    def test_the_root_cause_shows_a_verified_script_before_an_unverified_one(self):
        run = report.Run(mock.Mock(out="OUT"), {})
        unverified = {"scenario": "m.json", "reproducible": True, "repro": "OUT/repro/a.py",
                      "script_check": {"verified": False, "why": "no"}}
        verified = dict(unverified, repro="OUT/repro/b.py",
                        script_check={"verified": True, "why": None})
        groups = [{"signature": sig, "minimal": m, "replay_command": "r"}
                  for sig, m in (("I5 a", unverified), ("I5 b", verified))]
        with mock.patch.object(report.root_causes, "group", return_value=[
                {"title": "t", "id": "t", "signatures": ["I5 a", "I5 b"], "scenarios": ["s"],
                 "count": 2, "example": {"invariant": "I5"}, "location": None}]):
            causes = run._causes(groups)
        self.assertEqual(causes[0]["minimal"]["repro"], "OUT/repro/b.py")


class ExitCodes(unittest.TestCase):
    def test_a_failure_of_the_suite_itself_exits_3_with_an_error_document(self):
        with tempfile.TemporaryDirectory() as out, tempfile.TemporaryFile("w+") as document, \
                redirect_stderr(io.StringIO()) as stderr, \
                mock.patch.object(suite, "_main", side_effect=KeyError("planted")):
            code = suite.main(["--scenarios", support.GOOD, "--out", out, "--json",
                               "--json-fd", str(os.dup(document.fileno()))])
            document.seek(0)
            text = document.read()
        self.assertEqual(code, suite.EXIT_SUITE_FAILED)
        self.assertIn("the suite itself failed: KeyError", stderr.getvalue())
        error = json.loads(text)
        self.assertEqual(error["exit_code"], 3)
        self.assertEqual(summary_schema.errors(error), [])


if __name__ == "__main__":
    unittest.main()
