"""The supervised suite (`python3 -m zerocheck_ds suite`) on the adapters that need no DeepSpeed:
verdicts for every scenario whatever a rank does, rank reuse, baselines, Ctrl-C, no orphans."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

from . import support

GOOD_NAMES = sorted(n[: -len(".json")] for n in os.listdir(support.GOOD))


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def processes_with(marker):
    """Pids of live processes whose environment holds MARKER (ours, and only ours)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return [p for p in found if p != os.getpid()]


class Suite(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.marker = f"ZEROCHECK_TEST_MARKER={uuid.uuid4().hex}"

    def tearDown(self):
        self._tmp.cleanup()

    def out(self, name="out"):
        return os.path.join(self._tmp.name, name)

    def suite(self, args, timeout=120, **variables):
        key, value = self.marker.split("=")
        return support.run_cli(["suite", *args], timeout=timeout, **{key: value}, **variables)

    def verdicts(self, out):
        folder = os.path.join(out, "verdicts")
        return {n[: -len(".verdict.json")]: read_json(os.path.join(folder, n))
                for n in os.listdir(folder)}

    def assertNoOrphans(self):
        time.sleep(0.2)
        self.assertEqual(processes_with(self.marker), [], "rank processes outlived the run")

    def test_passthrough_holds_on_reused_ranks(self):
        run = self.suite(["--scenarios", support.GOOD, "--out", self.out(), "--world", "2",
                          "--adapter", "passthrough"])
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        verdicts = self.verdicts(self.out())
        self.assertEqual(sorted(verdicts), GOOD_NAMES)
        self.assertTrue(all(v["outcome"] == "ok" for v in verdicts.values()))
        summary = read_json(os.path.join(self.out(), "summary.json"))
        self.assertEqual(summary["scenarios_run"], len(GOOD_NAMES))
        self.assertEqual(summary["rank_starts"], 1)  # one import for the whole batch
        self.assertEqual(summary["signatures"], [])
        with open(os.path.join(self.out(), "report.md"), encoding="utf-8") as f:
            self.assertIn("every invariant held", f.read())
        self.assertNoOrphans()

    def test_batch_one_starts_ranks_per_scenario(self):
        # I10's second replays are replays too, each on ranks of its own with --batch 1: none here.
        run = self.suite(["--scenarios", support.GOOD, "--out", self.out(), "--adapter",
                          "passthrough", "--batch", "1", "--inert-fraction", "0"])
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        summary = read_json(os.path.join(self.out(), "summary.json"))
        self.assertEqual(summary["rank_starts"], len(GOOD_NAMES))

    def test_faulty_findings_are_grouped_by_signature(self):
        run = self.suite(["--scenarios", support.GOOD, "--out", self.out(), "--world", "2",
                          "--adapter", "faulty"])
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        summary = read_json(os.path.join(self.out(), "summary.json"))
        by_signature = {g["signature"]: g for g in summary["signatures"]}
        seed = by_signature["I1 initialize: attribute 'id' on Expert module not the user's"]
        self.assertEqual(seed["scenarios"], ["experts_attr_mod", "name_collisions"])
        self.assertGreater(seed["count"], len(seed["scenarios"]))  # many experts, one signature
        # The audit names the code that wrote `id` (the faulty adapter is its own "upstream").
        origin = seed["example"]["origin"]
        self.assertEqual((origin["file"], origin["function"], origin["action"]),
                         ("zerocheck_ds/engines/adapters.py", "_number_modules_like_0_15_4", "wrote"))
        self.assertIn("overwritten by zerocheck_ds/engines/adapters.py:", seed["example"]["message"])
        self.assertIn("I2 initialize: placement by 'id' on Expert module changed", by_signature)
        self.assertIn("I5 initialize: repeated initialize accepted", by_signature)
        self.assertIn("--scenarios", seed["replay_command"])
        self.assertIn("I1 initialize: attribute 'id' on Expert module", run.stdout)

    def test_a_crashing_rank_gets_a_verdict_and_the_run_goes_on(self):
        victim = "reinit_submodule_map"  # not first: it runs on reused ranks
        run = self.suite(["--scenarios", support.GOOD, "--out", self.out(), "--world", "2",
                          "--adapter", "passthrough"],
                         ZEROCHECK_DS_INJECT=f"crash:{victim}:1")
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        verdicts = self.verdicts(self.out())
        self.assertEqual(sorted(verdicts), GOOD_NAMES)
        crash = verdicts[victim]
        self.assertEqual(crash["outcome"], "crash")
        finding = crash["findings"][0]
        self.assertEqual(finding["signature"], "crash in initialize: SIGSEGV")
        self.assertIn("rank 1 died (SIGSEGV) in op 0 (initialize)", finding["message"])
        self.assertIn("rank 0:", finding["message"])
        # It ran on reused ranks, so it was judged again on fresh ones before the verdict.
        self.assertIn("rerun on fresh ranks: crash", crash["notes"][0])
        others = [v for n, v in verdicts.items() if n != victim]
        self.assertTrue(all(v["outcome"] == "ok" for v in others), others)
        self.assertIn("CRASH", run.stdout)
        self.assertNoOrphans()

    def test_a_hanging_scenario_times_out_and_the_run_goes_on(self):
        victim = GOOD_NAMES[0]
        # 10 s, not 2: on a loaded 2-core CI machine, torch 2.6 ranks took over 2 s to build the
        # model, and the hang was seen in "build" instead of in initialize.
        run = self.suite(["--scenarios", support.GOOD, "--out", self.out(), "--world", "2",
                          "--adapter", "passthrough", "--scenario-timeout", "10"],
                         ZEROCHECK_DS_INJECT=f"hang:{victim}:0")
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        verdicts = self.verdicts(self.out())
        hang = verdicts[victim]
        self.assertEqual(hang["outcome"], "hang")
        self.assertIn("no verdict after 10 s", hang["findings"][0]["message"])
        self.assertIn("rank 0: op 0 (initialize)", hang["findings"][0]["message"])
        self.assertTrue(all(v["outcome"] == "ok" for n, v in verdicts.items() if n != victim))
        summary = read_json(os.path.join(self.out(), "summary.json"))
        self.assertEqual(summary["rank_starts"], 2)
        self.assertEqual([h["scenario"] for h in summary["hangs"]], [victim])
        self.assertNoOrphans()

    def test_ctrl_c_stops_every_rank_and_keeps_what_is_done(self):
        env = support.cli_env(**dict([self.marker.split("=")]),
                              ZEROCHECK_DS_INJECT=f"hang:{GOOD_NAMES[1]}:1")
        process = subprocess.Popen(
            [sys.executable, "-m", "zerocheck_ds", "suite", "--scenarios", support.GOOD,
             "--out", self.out(), "--world", "2", "--adapter", "passthrough"],
            env=env, cwd=support.TESTS, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
        verdict = os.path.join(self.out(), "verdicts", f"{GOOD_NAMES[0]}.verdict.json")
        deadline = time.monotonic() + 60
        while not os.path.exists(verdict) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # now inside the hanging scenario
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=60)
        self.assertEqual(process.returncode, 130, output)
        self.assertIn("interrupted", output)
        summary = read_json(os.path.join(self.out(), "summary.json"))
        self.assertTrue(summary["interrupted"])
        self.assertEqual(summary["scenarios_run"], 1)
        self.assertNoOrphans()

    def test_baseline_reports_fixed_new_unchanged_and_fails_only_on_new(self):
        faulty, clean = self.out("faulty"), self.out("clean")
        common = ["--scenarios", support.GOOD, "--world", "2"]
        self.assertEqual(self.suite(common + ["--out", faulty, "--adapter", "faulty"]).returncode, 1)
        self.assertEqual(self.suite(common + ["--out", clean, "--adapter", "passthrough"]).returncode, 0)

        fixed = self.suite(common + ["--out", self.out("a"), "--adapter", "passthrough",
                                     "--baseline", faulty])
        self.assertEqual(fixed.returncode, 0, fixed.stdout + fixed.stderr)
        comparison = read_json(os.path.join(self.out("a"), "summary.json"))["baseline"]
        self.assertEqual(comparison["new"], [])
        self.assertIn("I5 initialize: repeated initialize accepted",
                      [e["signature"] for e in comparison["fixed"]])
        self.assertIn("fixed", fixed.stdout)

        same = self.suite(common + ["--out", self.out("b"), "--adapter", "faulty",
                                    "--baseline", faulty])
        self.assertEqual(same.returncode, 0, "unchanged findings must not fail a patch's CI")
        comparison = read_json(os.path.join(self.out("b"), "summary.json"))["baseline"]
        self.assertEqual((comparison["new"], comparison["fixed"]), ([], []))
        self.assertTrue(comparison["unchanged"])

        regressed = self.suite(common + ["--out", self.out("c"), "--adapter", "faulty",
                                         "--baseline", clean])
        self.assertEqual(regressed.returncode, 1)
        comparison = read_json(os.path.join(self.out("c"), "summary.json"))["baseline"]
        example = comparison["new"][0]
        self.assertEqual(example["baseline_count"], 0)
        self.assertIn(example["example_scenario"], GOOD_NAMES)

    def test_bad_usage_exits_2_naming_the_culprit(self):
        cases = {
            "--baseline": (["--baseline", self._tmp.name], "summary.json"),
            "--deepspeed-tree": (["--deepspeed-tree", self._tmp.name], "deepspeed/__init__.py"),
            "--world": (["--world", "9"], "--world"),
        }
        for name, (extra, text) in cases.items():
            with self.subTest(name):
                run = self.suite(["--scenarios", support.GOOD, "--out", self.out(),
                                  "--adapter", "passthrough", *extra])
                self.assertEqual(run.returncode, 2, run.stdout + run.stderr)
                self.assertIn(text, run.stderr)

    def test_unimportable_deepspeed_is_a_usage_error(self):
        run = support.run_cli(["suite", "--scenarios", support.GOOD, "--out", self.out()],
                              extra_paths=[support.BROKEN_DEEPSPEED])
        self.assertEqual(run.returncode, 2, run.stdout + run.stderr)
        self.assertIn("the ranks could not start", run.stderr)
        self.assertIn("`import deepspeed` failed", run.stderr)


if __name__ == "__main__":
    unittest.main()
