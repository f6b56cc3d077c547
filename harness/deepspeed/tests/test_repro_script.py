"""Standalone reproduction scripts: they import no zerocheck_ds, hold on plain PyTorch, and on the
stub DeepSpeed (tests/fixtures/stub_deepspeed) find exactly what the replay finds."""

import ast
import collections
import contextlib
import io
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

from . import support
from zerocheck_ds.engines import deepspeed_tree
from zerocheck_ds.findings import summary_schema
from zerocheck_ds.repro import minimise
from zerocheck_ds.repro.repro_script import (code_lines, no_script_reason, repro_script_text,
                                             scripts_for, write_repro_script)
from zerocheck_ds.repro.repro_straight import DEEPSPEED_DEFAULTS, script_config
from zerocheck_ds.suite import suite

SCENARIOS = sorted(os.path.join(support.GOOD, n) for n in os.listdir(support.GOOD)) + [
    os.path.join(support.UPSTREAM, "ds_id_experts.json")]
ALLOWED_IMPORTS = {"copy", "math", "os", "re", "socket", "struct", "sys", "torch", "deepspeed"}
# The script-size budgets, in code lines (repro_script.code_lines): a one-operation I1/I2/I5 finding,
# up to five operations, and a script that needs the dense twin (I3, I6).
ONE_OPERATION_BUDGET, FIVE_OPERATIONS_BUDGET, TWIN_BUDGET = 60, 150, 250
FAILED_LINE = re.compile(r"^FAILED (\S+) at (?:op (\d+)|build/teardown):", re.M)


RUN_EACH_PLAIN = """
import contextlib, io, json, runpy, sys
for script in sys.argv[1:]:
    sys.argv, out = [script, "--plain"], io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as e:
            code = e.code
    print(json.dumps({"script": script, "exit": code, "stdout": out.getvalue()}), flush=True)
"""


def target(invariant, **fields):
    found = {"signature": f"test {invariant}", "invariant": invariant, "op_index": None,
             "op": "", "module_path": None, "param": None, "attribute": None,
             "exception_type": None}
    found.update(fields)
    return found


def imports_of(text):
    """The top-level packages a script's source imports."""
    imported = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            imported.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module.split(".")[0])
    return imported


def name_of(path):
    return os.path.basename(path)[: -len(".json")]


def script_env(extra_paths=(), **variables):
    """No inherited world, and zerocheck_ds deliberately not importable: the script stands alone."""
    env = support.cli_env(extra_paths, **variables)
    del env["PYTHONPATH"]
    if extra_paths:
        env["PYTHONPATH"] = os.pathsep.join(extra_paths)
    return env


class ReproScript(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def write(self, scenario, goal):
        path = os.path.join(self.dir, f"{name_of(scenario)}_{goal['invariant']}.py")
        write_repro_script(scenario, goal, path)
        return path

    def run_scripts(self, scripts, args=(), extra_paths=(), **variables):
        """Runs the scripts side by side (they are independent); returns their CompletedProcess."""
        procs = [subprocess.Popen([sys.executable, path, *args], cwd=self.dir, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=script_env(extra_paths, **variables)) for path in scripts]
        runs = []
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            runs.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
        return runs

    def test_scripts_compile_and_import_only_torch_deepspeed_and_the_standard_library(self):
        for scenario in SCENARIOS:
            for goal in (target("I1", attribute="id"), target("I2"), target("I5"),
                         target("op", exception_type="AssertionError"), target("crash"),
                         target("hang")):
                with self.subTest(scenario=name_of(scenario), invariant=goal["invariant"]):
                    text = repro_script_text(scenario, goal)
                    compile(text, "repro.py", "exec")
                    self.assertNotIn("zerocheck_ds", text)
                    self.assertLessEqual(imports_of(text), ALLOWED_IMPORTS)

    def test_a_one_operation_script_holds_only_what_it_uses(self):
        # The seed bug's shape: a user's `id` on a Linear, one initialize: the script-size budget of
        # 60 code lines (148 with the dispatcher, 387 before repro_runtime.py, 76 in the first
        # straight-line form).
        text = repro_script_text(os.path.join(support.FIXTURES, "bisect", "user_id.json"),
                                 target("I1", attribute="id", op_index=0, op="initialize"),
                                 stage=2, produced_on="deepspeed 0.14.5, commit eb07d41f9")
        self.assertLessEqual(code_lines(text), ONE_OPERATION_BUDGET)
        # The seed bug as --shrink leaves it on v0.14.5: one Expert with the user's `id` 59.
        seed = repro_script_text(os.path.join(support.FIXTURES, "repro", "seed_bug_shrunk.json"),
                                 target("I1", attribute="id", op_index=0, op="initialize"))
        self.assertLessEqual(code_lines(seed), ONE_OPERATION_BUDGET)
        # One initialize of two placed experts: the owner check comes with an I2 finding (93
        # code lines before the plain forms, 64 before DeepSpeed's defaults left CONFIG), the
        # attribute check with an I1 finding (61).
        placement = os.path.join(support.FIXTURES, "repro", "one_op_placement.json")
        placed = repro_script_text(placement, target("I2", op_index=0, op="initialize"))
        self.assertLessEqual(code_lines(placed), ONE_OPERATION_BUDGET)
        self.assertIn("def check_owner_by_attr(", placed)
        placed_i1 = repro_script_text(placement, target("I1", attribute="id", op_index=0,
                                                        op="initialize"))
        self.assertLessEqual(code_lines(placed_i1), ONE_OPERATION_BUDGET)
        self.assertNotIn("PLACEMENT_ATTR", placed_i1)  # nor the placement's comment
        self.assertNotIn("# I2: each expert", placed_i1)
        # The docstring names the checks the script holds, no others.
        self.assertIn("Checked after every operation, I2: placement owners agree.",
                      " ".join(placed.split()))
        self.assertNotIn("I1:", placed.split('"""')[1])
        self.assertIn("Checked after every operation, I1: every attribute",
                      " ".join(placed_i1.split()))
        self.assertNotIn("I2:", placed_i1.split('"""')[1])
        for straight in (text, placed, seed, placed_i1):  # no dispatcher, no stand-in engine
            for absent in ("def initialize(op_index", "class PlainEngine", "def check(",
                           "_reported", "def record_failure"):  # each check runs once
                self.assertNotIn(absent, straight)
            self.assertIn("\ndef fail(invariant, op_index, attribute, expected, actual, text, "
                          "once=None):", straight)  # record_failure, under its general name
            self.assertLessEqual(max(map(len, straight.splitlines())), 100)
        # What produced it, in its header.
        import torch
        self.assertIn(f"(1 rank(s), 1 operations, ZeRO stage 2), on deepspeed 0.14.5, commit "
                      f"eb07d41f9 with torch {torch.__version__}.", " ".join(text.split()))
        for absent in ("def fingerprint", "def micro_batch", "def splitmix64", "class RouteCursor",
                       "def check_owner_by", "def backward", "def step", "import re", "import math"):
            self.assertNotIn(absent, text)

    def test_a_five_operation_training_script_is_straight_and_within_the_budget(self):
        # Initialize, forward, backward, step and a user's write: 119 code lines (297 with the
        # dispatcher and the stand-in DeepSpeed, 90 of them seeded.py's functions).
        five = os.path.join(support.FIXTURES, "repro", "five_ops.json")
        for goal in (target("I1", attribute="ds_id", op_index=4, op="set_attr"),
                     target("op", exception_type="RuntimeError", op_index=3, op="step")):
            with self.subTest(goal["invariant"]):
                text = repro_script_text(five, goal)
                self.assertLessEqual(code_lines(text), FIVE_OPERATIONS_BUDGET)
                for absent in ("def initialize(op_index", "class StandInDeepSpeed", "def check(",
                               "def splitmix64(state)", "class SequentialNode"):
                    self.assertNotIn(absent, text)
                self.assertIn("engine.backward(loss)\n", text)
        # The raising step ends the script: the write after it cannot come first.
        self.assertIn("# op 4 comes after the finding's operation: left out", text)
        self.assertNotIn("'ds_id', 3)", text)

    def test_a_repeated_initialize_script_is_straight_and_within_the_budget(self):
        # Two initializes of the root (I5): 136 code lines (344 in the general form before).
        text = repro_script_text(os.path.join(support.FIXTURES, "repro", "repeat_init.json"),
                                 target("I5", op_index=1, op="initialize"))
        self.assertLessEqual(code_lines(text), FIVE_OPERATIONS_BUDGET)
        for absent in ("def initialize(op_index", "class StandInDeepSpeed", "def check(",
                       "def refusal_reason"):
            self.assertNotIn(absent, text)
        self.assertIn("must be refused\nrepeat_initialize(1, 'a live engine already manages", text)

    def test_a_repeat_where_the_finding_is_not_I5s_runs_without_the_I5_checks(self):
        # Two initializes of the root and an I1 finding at the repeat: the repeat and the
        # probe's forward run as the replay runs them, the I5 checks (the fingerprint, the
        # refusal rule) are I5's own script's: 165 and 171 code lines with them.
        for scenario in (os.path.join(support.FIXTURES, "repro", "repeat_init.json"),
                         os.path.join(os.path.dirname(support.PACKAGE_ROOT), "tests",
                                      "oracle_scenarios", "repeat-refused-with-wrong-error.json")):
            with self.subTest(name_of(scenario)):
                text = repro_script_text(scenario, target("I1", attribute="id", op_index=1,
                                                          op="initialize"))
                self.assertLessEqual(code_lines(text), FIVE_OPERATIONS_BUDGET)
                self.assertLessEqual(max(map(len, text.splitlines())), 100)
                self.assertIn("\nrepeat_initialize_unjudged(1, lambda: initialize(model, ", text)
                self.assertIn("check_user_attrs(1)\n", text)
                for absent in ("def fingerprint", "def is_refusal", "def repeat_initialize(",
                               "import re"):
                    self.assertNotIn(absent, text)

    def test_a_forward_after_a_repeat_cannot_end_the_script_before_its_verdict(self):
        # On master a failed repeat leaves DeepSpeed's hooks on the model and the next forward
        # raises: an I1 finding at that forward needs the script to print the failure and go on
        # (unguarded, 3 of 23 scripts of a master shrink died before their verdict).
        fixture = os.path.join(support.FIXTURES, "repro", "repeat_init.json")
        with open(fixture, encoding="utf-8") as f:
            scenario = json.load(f)
        scenario["ops"].append({"op": "forward"})
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "repeat_then_forward.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(scenario, f)
            text = repro_script_text(path, target("I1", attribute="id", op_index=2, op="forward"))
        forward = text.split("\n# op 2: forward\n", 1)[1]
        self.assertTrue(forward.startswith("try:\n    x, y = micro_batch(2)\n    loss = "),
                        forward[:120])
        self.assertIn("except ERRORS as e:\n    op_failed(2, 'forward', e)\n", forward)
        self.assertLessEqual(code_lines(text), FIVE_OPERATIONS_BUDGET)

    def test_repeats_are_announced_where_a_correct_engine_refuses_them(self):
        text = repro_script_text(support.good("tied_frozen_values"), target("I5"))
        blocks = {b.split(":")[0]: b for b in text.split("\n# op ")[1:]}
        for op in ("5", "6"):  # the root, then module '2' (tied to the managed '0')
            self.assertIn("must be refused", blocks[op])
        for op in ("1", "7"):  # first ones; 7's fresh optimizer is new, not the managed one
            self.assertNotIn("must be refused", blocks[op])
        # SGD with the schema's momentum, as both replays build it.
        self.assertIn("initialize(7, target, torch.optim.SGD(trainable(target), lr=0.1, "
                      "momentum=0.9))", blocks["7"])

    def test_written_script_is_executable_and_a_bad_target_is_refused(self):
        path = self.write(SCENARIOS[0], target("I1"))
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o755)
        with self.assertRaisesRegex(ValueError, "invariant"):
            repro_script_text(SCENARIOS[0], target("I9"))

    def test_plain_pytorch_does_not_reproduce_and_breaks_nothing(self):
        kinds = [target("I1", attribute="id"), target("I2"), target("I5"),
                 target("op", exception_type="RuntimeError"), target("crash")]
        scripts = [self.write(s, goal) for s, goal in zip(SCENARIOS, kinds)]
        scripts += [self.write(os.path.join(support.FIXTURES, *where), goal) for where, goal in (
            (("bisect", "user_id.json"), target("I1", attribute="id", op_index=0)),
            (("repro", "one_op_placement.json"), target("I2", op_index=0)),
            (("repro", "seed_bug_shrunk.json"), target("I1", attribute="id", op_index=0)),
            (("repro", "five_ops.json"), target("I1", attribute="ds_id", op_index=4)),
            (("repro", "five_ops.json"), target("op", exception_type="RuntimeError",
                                                op_index=3)),
            (("repro", "repeat_init.json"), target("I5", op_index=1)),
            (("repro", "repeat_init.json"), target("I1", attribute="tag", op_index=1)),
            (("repro", "one_op_placement.json"), target("I1", attribute="id", op_index=0)))]
        # One interpreter runs them all, each as `python3 SCRIPT --plain` would (as __main__,
        # fresh globals): torch's import is most of a run's time.
        batch = subprocess.run([sys.executable, "-c", RUN_EACH_PLAIN, *scripts], cwd=self.dir,
                               env=script_env(), capture_output=True, text=True, timeout=120)
        self.assertEqual(batch.returncode, 0, batch.stderr)
        runs = [json.loads(line) for line in batch.stdout.splitlines()]
        self.assertEqual([r["script"] for r in runs], scripts, batch.stderr)
        for run in runs:
            with self.subTest(os.path.basename(run["script"])):
                self.assertEqual(run["exit"], 0, run["stdout"] + batch.stderr)
                self.assertIn("NOT REPRODUCED test ", run["stdout"])
                self.assertNotIn("FAILED", run["stdout"])

    def test_plain_run_as_a_maintainer_runs_it(self):
        run, = self.run_scripts([self.write(SCENARIOS[-1], target("I5"))], ["--plain"])
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertEqual(run.stdout, "NOT REPRODUCED test I5\n")

    def test_stub_deepspeed_reproduces_what_the_replay_finds(self):
        # One target per scenario; a script must reproduce exactly when the replay's verdict
        # holds a matching finding, and print the same (invariant, op) failures on the way.
        goals = {
            "ds_id_experts": target("I1", attribute="ds_id", module_path="0.experts.0"),
            "experts_attr_mod": target("I5", op_index=5, op="initialize"),
            "name_collisions": target("op", exception_type="AssertionError"),
            "reinit_submodule_map": target("I2"),
            "tied_frozen_values": target("I1", attribute="ds_id"),
        }
        out = os.path.join(self.dir, "verdicts")
        replay = support.run_cli(["--scenarios", *SCENARIOS, "--out", out, "--adapter",
                                  "deepspeed", "--any-world"], extra_paths=[support.STUB_DEEPSPEED])
        self.assertEqual(replay.returncode, 1, replay.stdout + replay.stderr)
        scripts = [self.write(s, goals[name_of(s)]) for s in SCENARIOS]
        runs = dict(zip(map(name_of, SCENARIOS),
                        self.run_scripts(scripts, extra_paths=[support.STUB_DEEPSPEED])))
        for name, run in runs.items():
            with self.subTest(name):
                with open(os.path.join(out, f"{name}.verdict.json"), encoding="utf-8") as f:
                    findings = json.load(f)["findings"]
                expected = collections.Counter((f["invariant"], f["op_index"]) for f in findings)
                found = collections.Counter((inv, int(op) if op else None)
                                            for inv, op in FAILED_LINE.findall(run.stdout))
                self.assertEqual(found, expected, run.stdout + run.stderr)
                goal = goals[name]
                reproduced = any(matches(goal, f) for f in findings)
                self.assertEqual(run.returncode, 1 if reproduced else 0, run.stdout + run.stderr)
                self.assertIn(("REPRODUCED " if reproduced else "NOT REPRODUCED ")
                              + goal["signature"], run.stdout)
        self.assertIn("REPRODUCED test I1: expected 0, got 3 (op 0: module '0.experts.0' "
                      "attribute 'ds_id': expected 0, got 3)", runs["ds_id_experts"].stdout)
        self.assertIn("REPRODUCED test I5: expected refused, got accepted (op 5: a repeated "
                      "initialize was accepted", runs["experts_attr_mod"].stdout)

    def test_straight_line_scripts_find_on_the_stub_what_the_replay_finds(self):
        # The straight-line fixtures with `ds_id` (what the stub numbers), and a user's write
        # after the initialize that the stub leaves alone.
        scenarios, goals = [], {}
        for name, invariant in (("seed_bug_shrunk", "I1"), ("one_op_placement", "I2"),
                                ("five_ops", "I1"), ("repeat_init", "I5")):
            with open(os.path.join(support.FIXTURES, "repro", f"{name}.json"),
                      encoding="utf-8") as f:
                scenario = json.loads(f.read().replace('"id"', '"ds_id"'))
            if name == "seed_bug_shrunk":
                scenario["ops"].append({"op": "set_attr", "module": "", "name": "tag",
                                        "value": "mine"})
            scenarios.append(os.path.join(self.dir, f"{name}.json"))
            with open(scenarios[-1], "w", encoding="utf-8") as f:
                json.dump(scenario, f)
            # The training script runs to the finding's operation: the last one here.
            goals[name] = target(invariant, attribute="ds_id" if invariant == "I1" else None,
                                 op_index=0 if invariant != "I5" and name != "five_ops"
                                 else len(scenario["ops"]) - 1)
        out = os.path.join(self.dir, "verdicts")
        replay = support.run_cli(["--scenarios", *scenarios, "--out", out, "--adapter",
                                  "deepspeed", "--any-world"], extra_paths=[support.STUB_DEEPSPEED])
        self.assertEqual(replay.returncode, 1, replay.stdout + replay.stderr)
        scripts = [self.write(path, goals[name_of(path)]) for path in scenarios]
        for path, script, run in zip(scenarios, scripts, self.run_scripts(
                scripts, extra_paths=[support.STUB_DEEPSPEED])):
            with self.subTest(name_of(path)):
                with open(script, encoding="utf-8") as f:
                    self.assertNotIn("def initialize(op_index", f.read())  # the straight-line form
                goal = goals[name_of(path)]
                with open(os.path.join(out, f"{name_of(path)}.verdict.json"),
                          encoding="utf-8") as f:
                    findings = [f for f in json.load(f)["findings"]
                                if f["invariant"] == goal["invariant"]]  # its only check
                self.assertTrue(findings)
                found = collections.Counter((inv, int(op) if op else None)
                                            for inv, op in FAILED_LINE.findall(run.stdout))
                self.assertEqual(found, collections.Counter((f["invariant"], f["op_index"])
                                                            for f in findings), run.stdout)
                self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
                self.assertIn("REPRODUCED " + goal["signature"], run.stdout)

    def test_a_repeat_in_an_I1_script_finds_on_the_stub_what_the_replay_finds(self):
        # The user's `ds_id` (what the stub numbers) and two initializes of the root: the
        # script runs the repeat without judging it, and checks I1 after each initialize.
        with open(os.path.join(support.FIXTURES, "repro", "repeat_init.json"),
                  encoding="utf-8") as f:
            scenario = json.load(f)
        scenario["tree"][1]["attrs"] = [{"name": "ds_id", "value": 7}]
        path = os.path.join(self.dir, "repeat_ds_id.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(scenario, f)
        out = os.path.join(self.dir, "verdicts")
        replay = support.run_cli(["--scenarios", path, "--out", out, "--adapter", "deepspeed"],
                                 extra_paths=[support.STUB_DEEPSPEED])
        self.assertEqual(replay.returncode, 1, replay.stdout + replay.stderr)
        with open(os.path.join(out, "repeat_ds_id.verdict.json"), encoding="utf-8") as f:
            findings = json.load(f)["findings"]
        self.assertIn("I5", {f["invariant"] for f in findings})  # the script's to leave alone
        goal = target("I1", attribute="ds_id", op_index=1, op="initialize")
        script = self.write(path, goal)
        with open(script, encoding="utf-8") as f:
            self.assertIn("repeat_initialize_unjudged(1,", f.read())
        run, = self.run_scripts([script], extra_paths=[support.STUB_DEEPSPEED])
        found = collections.Counter((inv, int(op) if op else None)
                                    for inv, op in FAILED_LINE.findall(run.stdout))
        self.assertEqual(found, collections.Counter((f["invariant"], f["op_index"])
                                                    for f in findings if f["invariant"] == "I1"),
                         run.stdout)
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        self.assertIn("REPRODUCED test I1: expected 7, got ", run.stdout)

    def test_a_training_script_reproduces_a_raising_step_as_the_replay_does(self):
        five = os.path.join(support.FIXTURES, "repro", "five_ops.json")
        out = os.path.join(self.dir, "verdicts")
        replay = support.run_cli(["--scenarios", five, "--out", out, "--adapter", "deepspeed"],
                                 extra_paths=[support.STUB_DEEPSPEED],
                                 ZEROCHECK_STUB_DEEPSPEED_FAIL="step")
        self.assertEqual(replay.returncode, 1, replay.stdout + replay.stderr)
        with open(os.path.join(out, "five_ops.verdict.json"), encoding="utf-8") as f:
            raised = [f for f in json.load(f)["findings"] if f["invariant"] == "op"]
        self.assertEqual([(f["op_index"], f["actual"]) for f in raised], [(3, "RuntimeError")])
        script = self.write(five, target("op", exception_type="RuntimeError", op_index=3))
        run, = self.run_scripts([script], extra_paths=[support.STUB_DEEPSPEED],
                                ZEROCHECK_STUB_DEEPSPEED_FAIL="step")
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        self.assertIn("REPRODUCED test op: expected no exception, got RuntimeError (op 3: step "
                      "raised RuntimeError: stub deepspeed: step failed on purpose)", run.stdout)
        run, = self.run_scripts([script], extra_paths=[support.STUB_DEEPSPEED])
        self.assertEqual((run.returncode, run.stdout.splitlines()[-1]),
                         (0, "NOT REPRODUCED test op"), run.stdout + run.stderr)

    def test_an_invalid_config_is_given_to_the_initialize_as_the_replay_gives_it(self):
        # The failed-initialize scenario (an initialize given config_error offload_optimizer,
        # which the stub accepts): alone, and before the root's engine trains. The script gives
        # the same invalid config (straight-line form) and finds on the stub what the replay
        # finds; on plain PyTorch it is refused and nothing reproduces.
        with open(os.path.join(os.path.dirname(support.PACKAGE_ROOT), "tests", "scenarios",
                               "upstream_lifecycle", "config_error_offload_optimizer.json"),
                  encoding="utf-8") as f:
            base = json.load(f)
        self.assertEqual(base["ops"][0]["config_error"], "offload_optimizer")
        scenarios = []
        for name, ops in (("alone", base["ops"][:1]),
                          ("before_training", base["ops"][:1] + base["ops"][2:6])):
            scenarios.append(os.path.join(self.dir, f"config_error_{name}.json"))
            with open(scenarios[-1], "w", encoding="utf-8") as f:
                json.dump(dict(base, world_size=1, ops=ops), f)
        out = os.path.join(self.dir, "verdicts")
        replay = support.run_cli(["--scenarios", *scenarios, "--out", out, "--adapter",
                                  "deepspeed"], extra_paths=[support.STUB_DEEPSPEED])
        self.assertEqual(replay.returncode, 1, replay.stdout + replay.stderr)
        goal = target("I5", signature="I5 initialize: an invalid config accepted", op_index=0,
                      op="initialize", attribute="invalid config", i5_expected="refused")
        scripts = [self.write(path, goal) for path in scenarios]
        for script in scripts:
            with open(script, encoding="utf-8") as f:
                text = f.read()
            self.assertNotIn("def initialize(op_index", text)  # the straight-line form
            self.assertIn("['zero_optimization']['offload_optimizer'] = {'device': 'cpu'}", text)
            self.assertIn("invalid_initialize(0, 'offload_optimizer', [user_optimizer]", text)
            # The header says what this I5 finding is, not what a repeated initialize's is.
            header = " ".join(text.split('"""')[1].split())
            self.assertIn("What fails (I5): an initialize given an invalid config is not refused "
                          "as a configuration error", header)
            self.assertNotIn("repeated initialize", header)
        runs = self.run_scripts(scripts, extra_paths=[support.STUB_DEEPSPEED])
        plains = self.run_scripts(scripts, ["--plain"])
        for path, run, plain in zip(scenarios, runs, plains):
            with self.subTest(name_of(path)):
                with open(os.path.join(out, f"{name_of(path)}.verdict.json"),
                          encoding="utf-8") as f:
                    findings = [f for f in json.load(f)["findings"] if f["invariant"] == "I5"]
                self.assertTrue(any(f["actual"] == "accepted" for f in findings), findings)
                found = collections.Counter((inv, int(op) if op else None)
                                            for inv, op in FAILED_LINE.findall(run.stdout))
                self.assertEqual(found, collections.Counter(
                    (f["invariant"], f["op_index"]) for f in findings), run.stdout)
                self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
                self.assertIn("REPRODUCED I5 initialize: an invalid config accepted: expected "
                              "refused, got accepted (op 0: an initialize with an invalid config "
                              "(offload_optimizer) was accepted)", run.stdout)
                self.assertEqual((plain.returncode, plain.stdout),
                                 (0, "NOT REPRODUCED I5 initialize: an invalid config accepted\n"),
                                 plain.stderr)

    def test_an_operation_raising_is_reproduced_with_its_exception(self):
        goal = target("op", exception_type="RuntimeError")
        run, = self.run_scripts([self.write(SCENARIOS[-1], goal)],
                                extra_paths=[support.STUB_DEEPSPEED],
                                ZEROCHECK_STUB_DEEPSPEED_FAIL="step")
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        self.assertIn("REPRODUCED test op: expected no exception, got RuntimeError (op 3: step "
                      "raised RuntimeError: stub deepspeed: step failed on purpose)", run.stdout)


# Text a signature or a user's attribute name may hold: a line break, both quotes, a backslash,
# ", " (where a long call is cut into lines), triple quotes and characters beyond ASCII.
ODD = 'line\nbreak, "double" \'single\' \\back, """ é ☃'


class OddText(unittest.TestCase):
    """Every literal a writer emits is repr()-safe: a signature or attribute name holding ODD
    gives a script, in each form, that compiles and prints its signature whole in the verdict (an
    I5 signature with ", " was cut inside its string literal: a SyntaxError that lost a run)."""

    setUp, tearDown = ReproScript.setUp, ReproScript.tearDown

    def scenario(self, fixture, edit):
        with open(fixture, encoding="utf-8") as f:
            scenario = json.load(f)
        edit(scenario)
        path = os.path.join(self.dir, os.path.basename(fixture))
        with open(path, "w", encoding="utf-8") as f:
            json.dump(scenario, f)
        return path

    def test_each_form_compiles_and_prints_the_signature_whole(self):
        def odd_attribute(scenario):
            scenario["tree"][-1]["attrs"] = [{"name": ODD, "value": ODD}]
            scenario["ops"].append({"op": "set_attr", "module": "", "name": ODD, "value": ODD})
        seed = self.scenario(os.path.join(support.FIXTURES, "repro", "seed_bug_shrunk.json"),
                             odd_attribute)
        long = "I5 initialize: repeated initialize failed, not refused: " + "ValueError: x, " * 5
        cases = {  # name -> (scenario, target, the form's mark)
            "straight I1": (seed, target("I1", signature=f"I1 initialize: attribute {ODD!r}",
                                         attribute=ODD, op_index=0, op="initialize",
                                         module_path=ODD), "straight"),
            "straight I5": (os.path.join(support.FIXTURES, "repro", "repeat_init.json"),
                            target("I5", signature=long + ODD, op_index=1, op="initialize",
                                   exception_type="ValueError", i5_expected=ODD), "straight"),
            "general I1": (seed, target("I1", signature=ODD * 3, attribute=ODD), "general"),
            "twin I3": (TwinScript.STALE, dict(TwinScript.GOAL, signature=long + ODD), "twin"),
        }
        scripts = []
        for name, (scenario, goal, form) in cases.items():
            with self.subTest(name):
                text = repro_script_text(scenario, goal, script_name=ODD + ".py",
                                         produced_on=ODD)
                compile(text, "repro.py", "exec")
                self.assertEqual("def initialize(op_index" in text, form == "general")
                self.assertEqual("class Twin" in text, form == "twin")
                scripts.append(os.path.join(self.dir, f"{len(scripts)}.py"))
                write_repro_script(scenario, goal, scripts[-1])
        batch = subprocess.run([sys.executable, "-c", RUN_EACH_PLAIN, *scripts], cwd=self.dir,
                               env=script_env(), capture_output=True, text=True, timeout=300)
        self.assertEqual(batch.returncode, 0, batch.stderr)
        runs = [json.loads(line) for line in batch.stdout.splitlines()]
        self.assertEqual(len(runs), len(cases), batch.stderr)
        for (name, (_, goal, _)), run in zip(cases.items(), runs):
            with self.subTest(name):
                self.assertEqual(run["exit"], 0, run["stdout"] + batch.stderr)
                self.assertTrue(run["stdout"].endswith(f"NOT REPRODUCED {goal['signature']}\n"),
                                run["stdout"])


class ShrinkWritesCheckedScripts(unittest.TestCase):
    """--shrink on the stub DeepSpeed: each script written is run before it counts (verified:
    REPRODUCED on the tree, NOT REPRODUCED with --plain), and a writer that raises costs its one
    script, said in summary.json and report.md, never the run."""

    def test_a_writer_that_raises_costs_one_script_and_the_other_is_verified(self):
        real = minimise.write_repro_script

        def broken_for_i5(scenario, goal, *rest):  # the old writer's SyntaxError on an I5
            if goal["invariant"] == "I5":
                raise SyntaxError("unterminated string literal (detected at line 37)")
            return real(scenario, goal, *rest)

        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(support.FIXTURES, "repro", "repeat_init.json"),
                      encoding="utf-8") as f:
                scenario = json.load(f)
            scenario["tree"][1]["attrs"] = [{"name": "ds_id", "value": 7}]  # the stub numbers it
            path, out = os.path.join(tmp, "repeat_ds_id.json"), os.path.join(tmp, "out")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(scenario, f)
            stub_path = os.pathsep.join([support.STUB_DEEPSPEED, support.PACKAGE_ROOT])
            with mock.patch.object(minimise, "write_repro_script", broken_for_i5), \
                    mock.patch.dict(os.environ, PYTHONPATH=stub_path), \
                    contextlib.redirect_stdout(io.StringIO()) as log:
                code = suite.main(["--scenarios", path, "--out", out, "--adapter", "deepspeed",
                                   "--world", "1", "--shrink", "--shrink-seconds", "20",
                                   "--no-control"])
            self.assertEqual(code, 1, log.getvalue())
            with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
                summary = json.load(f)
            with open(os.path.join(out, "report.md"), encoding="utf-8") as f:
                report = f.read()
        self.assertEqual(summary_schema.errors(summary), [])
        minimal = {g["invariant"]: g["minimal"] for g in summary["signatures"]}
        self.assertEqual(set(minimal), {"I1", "I5"}, log.getvalue())
        broken, good = minimal["I5"], minimal["I1"]
        self.assertEqual((broken["repro"], broken["script_check"], broken["script_error"]),
                         (None, None, "SyntaxError: unterminated string literal (detected at "
                                      "line 37)"))
        self.assertIn("- script not written: SyntaxError: unterminated string literal", report)
        self.assertIn("script not written: SyntaxError", log.getvalue())
        self.assertIsNone(good["script_error"])
        check = good["script_check"]
        self.assertEqual(check["verified"], True, check)
        self.assertIsNone(check["why"])
        self.assertEqual(check["tree"]["exit"], 1)
        self.assertTrue(check["tree"]["line"].startswith("REPRODUCED I1 initialize: attribute "
                                                         "'ds_id'"), check)
        self.assertEqual(check["plain"], {"exit": 0, "line": "NOT REPRODUCED " +
                                          [g["signature"] for g in summary["signatures"]
                                           if g["invariant"] == "I1"][0], "ranks": [0]})
        self.assertIn("script verified: REPRODUCED on the tree", log.getvalue())


# DeepSpeed v0.14.5's source, where the project's checkout has the shared trees beside it.
DEEPSPEED_V0_14_5 = os.path.join(os.path.dirname(os.path.dirname(support.PACKAGE_ROOT)), "..",
                                 "shared", "deepspeed", "v0.14.5")
# Run in a process that imports DeepSpeed: for each [config, other] of the JSON list in argv[1],
# the names of the attributes of DeepSpeedConfig that differ between the two.
PARSED_CONFIG_DIFFERENCES = """
import json, sys
from deepspeed.runtime.config import DeepSpeedConfig

def plain(value):
    if isinstance(value, (bool, int, float, str, type(None))):
        return value  # pp_int too: an int
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [plain(v) for v in value]
    return (type(value).__name__, plain(vars(value))) if hasattr(value, "__dict__") else value

def parsed(config):
    return {k: plain(v) for k, v in vars(DeepSpeedConfig(config)).items() if k != "_param_dict"}

for config, other in json.loads(sys.argv[1]):
    a, b = parsed(config), parsed(other)
    print("differing:", json.dumps(sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))))
"""


class ScriptConfig(unittest.TestCase):
    """A script's CONFIG leaves out what DeepSpeed holds anyway (repro_straight.DEEPSPEED_DEFAULTS),
    and DeepSpeed reads it as it reads the replay's."""

    REPLAYED = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
                "steps_per_print": 10, "zero_optimization": {
                    "stage": 3, "stage3_param_persistence_threshold": 100000,
                    "reduce_bucket_size": 500000000}, "zero_allow_untested_optimizer": True}

    def test_deepspeeds_own_defaults_are_left_out_and_nothing_else(self):
        replayed = json.loads(json.dumps(self.REPLAYED))
        self.assertEqual(script_config(replayed), {
            "train_micro_batch_size_per_gpu": 2, "steps_per_print": 10,
            "zero_optimization": {"stage": 3}, "zero_allow_untested_optimizer": True})
        self.assertEqual(replayed, self.REPLAYED)  # a copy
        # With a train_batch_size, DeepSpeed derives the steps from it: they stay.
        self.assertEqual(script_config({"train_batch_size": 4, "gradient_accumulation_steps": 1,
                                        "train_micro_batch_size_per_gpu": 2}),
                         {"train_batch_size": 4, "gradient_accumulation_steps": 1,
                          "train_micro_batch_size_per_gpu": 2})
        kept = {"gradient_accumulation_steps": 2, "zero_optimization": {
            "stage3_param_persistence_threshold": 0, "reduce_bucket_size": 5}}
        self.assertEqual(script_config(kept), kept)

    def test_the_defaults_are_what_deepspeed_v0_14_5_holds(self):
        if not os.path.isfile(os.path.join(DEEPSPEED_V0_14_5, "deepspeed", "__init__.py")):
            self.skipTest(f"no DeepSpeed v0.14.5 source at {DEEPSPEED_V0_14_5}")
        with tempfile.TemporaryDirectory() as folder:
            staged = deepspeed_tree.stage(DEEPSPEED_V0_14_5, os.path.join(folder, "v0.14.5"))
            env = dict(os.environ, **deepspeed_tree.environment(
                staged, deepspeed_tree.default_shims(DEEPSPEED_V0_14_5)))
            for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
                env.pop(name, None)
            base = script_config(self.REPLAYED)
            pairs = [[self.REPLAYED, base]]  # each key left out, or all of them: no difference
            for path, default in DEEPSPEED_DEFAULTS.items():
                with_default = json.loads(json.dumps(base))
                section = with_default
                for key in path[:-1]:
                    section = section.setdefault(key, {})
                section[path[-1]] = default
                pairs.append([with_default, base])
            # The comparison sees a value that is not the default.
            pairs.append([dict(base, zero_optimization={"stage": 3, "reduce_bucket_size": 5}),
                          base])
            run = subprocess.run([sys.executable, "-c", PARSED_CONFIG_DIFFERENCES,
                                  json.dumps(pairs)], cwd=staged, env=env, capture_output=True,
                                 text=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stderr)
        differences = [json.loads(line[len("differing:"):]) for line in run.stdout.splitlines()
                       if line.startswith("differing:")]  # DeepSpeed logs there too
        self.assertEqual(differences, [[]] * (len(pairs) - 1) + [["zero_config"]], run.stdout)


def matches(goal, finding):
    """The repro script's rule: same invariant, attribute when given, exception type for "op"."""
    if finding["invariant"] != goal["invariant"]:
        return False
    if goal["attribute"] is not None and finding["attribute"] != goal["attribute"]:
        return False
    return goal["invariant"] != "op" or finding["actual"] == goal["exception_type"]


class TwinScript(unittest.TestCase):
    """I3's scripts carry the dense twin (repro_runtime.Twin): within the budget, standalone, and
    plain PyTorch's data parallelism over one or two ranks does not reproduce (the upstream ctest
    shows DeepSpeed v0.14.5 reproducing the stale gradient with the same script)."""

    STALE = os.path.join(os.path.dirname(support.PACKAGE_ROOT), "tests", "scenarios",
                         "upstream_bugs", "expert_skipped_by_route.json")
    GOAL = target("I3", op_index=7, op="step", attribute="value")
    setUp, tearDown, write, run_scripts = (ReproScript.setUp, ReproScript.tearDown,
                                           ReproScript.write, ReproScript.run_scripts)

    def test_within_the_budget_and_standalone(self):
        text = repro_script_text(self.STALE, self.GOAL)
        self.assertLessEqual(code_lines(text), TWIN_BUDGET)
        self.assertLessEqual(imports_of(text), ALLOWED_IMPORTS)
        for present in ("class Twin", "def check_twin(", "twin.step()", "RouteCursor([1])",
                        "check_twin(7)"):
            self.assertIn(present, text)
        self.assertNotIn("check_twin(11)", text)  # it ends at the finding's operation

    def test_plain_data_parallelism_does_not_reproduce_on_one_or_two_ranks(self):
        script = self.write(self.STALE, self.GOAL)
        one, = self.run_scripts([script], ["--plain"])
        self.assertEqual((one.returncode, one.stdout), (0, "NOT REPRODUCED test I3\n"), one.stderr)
        port = str(29600 + os.getpid() % 300)
        procs = [subprocess.Popen([sys.executable, script, "--plain"], cwd=self.dir, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=script_env(RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                                                 MASTER_ADDR="127.0.0.1", MASTER_PORT=port))
                 for r in range(2)]
        for r, proc in enumerate(procs):
            out, err = proc.communicate(timeout=120)
            self.assertEqual((proc.returncode, out), (0, f"[rank {r}] NOT REPRODUCED test I3\n"),
                             err)

    def test_a_load_is_checked_against_the_twin_loading_the_same_save(self):
        tags = os.path.join(os.path.dirname(support.PACKAGE_ROOT), "tests", "scenarios",
                            "upstream_checkpoints", "tags_load_t1_without_optimizer_states.json")
        goal = target("I6", op_index=19, op="load", attribute="value")
        text = repro_script_text(tags, goal)
        self.assertLessEqual(code_lines(text), TWIN_BUDGET)
        for present in ("engine.save_checkpoint(CHECKPOINTS, tag='t1')",
                        "saves[9] = snapshot(twin.module, twin.optimizer)",
                        "saves[14] = snapshot(twin.module, twin.optimizer)",
                        "engine.load_checkpoint(CHECKPOINTS, tag='t1', load_optimizer_states=False)",
                        "twin.load(saves[9], optimizer_states=False)",
                        "check_twin(19, 'I6', dict(known, **{'the value before the load': before}))"):
            self.assertIn(present, text)
        script = self.write(tags, goal)
        port = str(29600 + (os.getpid() + 150) % 300)
        procs = [subprocess.Popen([sys.executable, script, "--plain"], cwd=self.dir, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=script_env(RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                                                 MASTER_ADDR="127.0.0.1", MASTER_PORT=port))
                 for r in range(2)]
        for r, proc in enumerate(procs):  # --plain's in-memory checkpoints give the save back
            out, err = proc.communicate(timeout=120)
            self.assertEqual((proc.returncode, out), (0, f"[rank {r}] NOT REPRODUCED test I6\n"),
                             err)

    def test_outside_the_twin_form_there_is_no_script_and_no_silent_one(self):
        self.assertTrue(scripts_for(self.STALE, self.GOAL))
        for goal, stage in ((target("I3", op_index=None), 3), (self.GOAL, 2),
                            (target("I4", op_index=7), 3)):
            with self.subTest(goal=goal["invariant"], stage=stage):
                self.assertFalse(scripts_for(self.STALE, goal, stage))
        with self.assertRaisesRegex(ValueError, "dense-twin form"):
            repro_script_text(self.STALE, self.GOAL, stage=2)

    def test_where_there_is_no_script_the_reason_says_why(self):
        invalid = os.path.join(os.path.dirname(support.PACKAGE_ROOT), "tests", "scenarios",
                               "upstream_lifecycle", "config_error_offload_optimizer.json")
        self.assertIsNone(no_script_reason(self.STALE, self.GOAL))
        for path, goal, stage, why in (
                (self.STALE, target("I4", op_index=7), 3, "the replay's own checks"),
                (self.STALE, self.GOAL, 2, "only where the dense-twin form takes its scenario"),
                # master's failed initialize, seen by the forward that follows it
                (invalid, target("I5", op_index=0, op="initialize",
                                 attribute="training still runs after a rejected initialize"), 3,
                 "an initialize given an invalid config is written only by the straight-line")):
            with self.subTest(goal=goal["invariant"], stage=stage):
                self.assertIn(why, no_script_reason(path, goal, stage))
                self.assertFalse(scripts_for(path, goal, stage))


if __name__ == "__main__":
    unittest.main()
