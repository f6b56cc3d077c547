"""The command line as users run it: exit codes, verdict files, stderr, two real ranks."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

from . import support


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class CommandLine(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.out = os.path.join(self._tmp.name, "out")

    def tearDown(self):
        self._tmp.cleanup()

    def test_passthrough_holds_and_writes_verdicts(self):
        # The good scenarios are for 1, 2 and 4 ranks: one rank's view of each (--any-world).
        run = support.run_cli(["--scenarios", support.GOOD, "--out", self.out,
                               "--adapter", "passthrough", "--any-world"])
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        names = sorted(n[: -len(".json")] for n in os.listdir(support.GOOD))
        self.assertEqual(sorted(os.listdir(self.out)),
                         sorted([f"{n}.verdict.json" for n in names] + ["summary.json"]))
        for name in names:
            verdict = read_json(os.path.join(self.out, f"{name}.verdict.json"))
            self.assertEqual(verdict["scenario"], name)
            self.assertEqual(verdict["adapter"], "passthrough")
            self.assertTrue(verdict["ok"])
            self.assertEqual(verdict["findings"], [])
        summary = read_json(os.path.join(self.out, "summary.json"))
        self.assertEqual(summary["scenarios_run"], len(names))
        self.assertEqual(summary["findings"], [])
        self.assertIn("0 finding(s)", run.stdout)

    def test_faulty_adapter_is_caught(self):
        run = support.run_cli(["--scenarios", support.good("experts_attr_mod"), "--out", self.out,
                               "--adapter", "faulty", "--any-world"])
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        verdict = read_json(os.path.join(self.out, "experts_attr_mod.verdict.json"))
        self.assertFalse(verdict["ok"])
        findings = verdict["findings"]
        self.assertIn({"invariant": "I1", "module_path": "1.experts.1", "attribute": "id", "expected": 1},
                      [{k: f[k] for k in ("invariant", "module_path", "attribute", "expected")}
                       for f in findings])
        self.assertTrue(any(f["invariant"] == "I2" for f in findings))
        self.assertTrue(any(f["invariant"] == "I5" and f["actual"] == "accepted" for f in findings))
        for f in findings:
            self.assertLessEqual({"invariant", "op_index", "module_path", "attribute", "expected",
                                  "actual", "exception"}, set(f))
        summary = read_json(os.path.join(self.out, "summary.json"))
        self.assertEqual(len(summary["findings"]), len(findings))
        self.assertEqual({f["scenario"] for f in summary["findings"]}, {"experts_attr_mod"})
        self.assertIn("FAIL experts_attr_mod", run.stdout)

    def test_bad_scenarios_exit_2_naming_the_json_path(self):
        for name, row in support.malformed_expectations().items():
            with self.subTest(name):
                path = os.path.join(support.MALFORMED, name)
                run = support.run_cli(["--scenarios", path, "--out", self.out,
                                       "--adapter", "passthrough"])
                self.assertEqual(run.returncode, 2, run.stderr)
                self.assertIn(f"{path}: {support.expected_line(row)[0]}", run.stderr)
                self.assertEqual(run.stdout, "")
        self.assertFalse(os.path.exists(self.out))  # nothing runs when any input is bad

    def test_bad_usage_exits_2(self):
        cases = [
            (["--scenarios", "no/such/dir", "--out", self.out], "no such file or directory"),
            (["--scenarios", support.GOOD, "--out", self.out, "--adapter", "bogus"], "invalid choice"),
            (["--out", self.out], "--scenarios"),
        ]
        for args, message in cases:
            with self.subTest(args):
                run = support.run_cli(args)
                self.assertEqual(run.returncode, 2, run.stderr)
                self.assertIn(message, run.stderr)
        run = support.run_cli(["--scenarios", support.GOOD, "--out", self.out,
                               "--adapter", "passthrough"], WORLD_SIZE="2")
        self.assertEqual(run.returncode, 2)
        self.assertIn("RANK is not set", run.stderr)

    def test_a_scenario_for_another_world_is_a_usage_error(self):
        # A world-2 scenario whose gather names modifier rank 1, on one rank: replayed, Gloo's
        # "invalid root rank: 1" would read as the engine's finding. Refused before any replay,
        # naming the file, its world_size and the ranks running it; the others are not named.
        gather = os.path.join(support.PACKAGE_ROOT, os.pardir, "tests", "scenarios",
                              "upstream_lifecycle", "gather_modifier_rank_1_submodule.json")
        one_rank = support.good("name_collisions")
        run = support.run_cli(["--scenarios", one_rank, gather, "--out", self.out,
                               "--adapter", "passthrough"])
        self.assertEqual(run.returncode, 2, run.stdout + run.stderr)
        self.assertIn(f"{gather}: world_size 2, but 1 rank runs it (WORLD_SIZE unset)", run.stderr)
        self.assertNotIn(one_rank, run.stderr)
        self.assertNotIn("Traceback", run.stderr)
        self.assertEqual(run.stdout, "")
        self.assertFalse(os.path.exists(self.out))  # nothing replayed
        # Rank 0 of two with a world-1 scenario: refused before the ranks meet (no rank 1 runs).
        run = support.run_cli(["--scenarios", one_rank, "--out", self.out,
                               "--adapter", "passthrough"], RANK="0", WORLD_SIZE="2",
                              MASTER_ADDR="127.0.0.1", MASTER_PORT=str(support.free_port()))
        self.assertEqual(run.returncode, 2, run.stdout + run.stderr)
        self.assertIn(f"{one_rank}: world_size 1, but 2 ranks run it (WORLD_SIZE=2)", run.stderr)
        self.assertFalse(os.path.exists(self.out))

    def test_two_ranks_merge_their_findings_and_rank_0_writes(self):
        args = [sys.executable, "-m", "zerocheck_ds", "--scenarios",
                support.good("experts_attr_mod"), "--out", self.out, "--adapter", "faulty"]
        # A port another process took between free_port() and rank 0's bind (an outgoing
        # connection of a test running beside this one can) is retried on a new one, as the
        # suite's pool does.
        for attempt in range(3):
            env = dict(WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(support.free_port()))
            ranks = [subprocess.Popen(args, env=support.cli_env(RANK=str(r), LOCAL_RANK=str(r), **env),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for r in range(2)]
            outputs = [p.communicate(timeout=120) for p in ranks]
            if not any("address already in use" in err.lower() for _, err in outputs):
                break
        self.assertEqual([p.returncode for p in ranks], [1, 1], outputs)
        self.assertEqual(outputs[1][0], "")  # only rank 0 reports
        verdict = read_json(os.path.join(self.out, "experts_attr_mod.verdict.json"))
        self.assertTrue(all(f["ranks"] == [0, 1] for f in verdict["findings"]))
        skipped = {s["what"] for s in verdict["skipped"]}
        self.assertNotIn("world size", skipped)


if __name__ == "__main__":
    unittest.main()
