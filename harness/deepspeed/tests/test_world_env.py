"""A rank process as DeepSpeed runs fast in it: world/world.py gives it the environment DeepSpeed's
launcher would (LOCAL_SIZE: without it DeepSpeed's CPU accelerator forks `numactl --hardware` at
every gradient reduce), and suite/heap.py freezes what it imported out of the garbage collector's
scans (DeepSpeed's eleven gc.collect() calls per ZeRO-3 initialize took 1.3 s each time). Both
are speed only; these tests keep them from vanishing."""

import glob
import os
import subprocess
import sys
import tempfile
import unittest

from tests import support
from zerocheck_ds.world import world

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # harness/deepspeed


class LocalSize(unittest.TestCase):
    def setUp(self):
        self._saved = os.environ.get("LOCAL_SIZE")
        os.environ.pop("LOCAL_SIZE", None)

    def tearDown(self):
        os.environ.pop("LOCAL_SIZE", None)
        if self._saved is not None:
            os.environ["LOCAL_SIZE"] = self._saved

    def test_the_node_s_process_count_is_the_world_s(self):
        world.launcher_environment(world.World(rank=1, world_size=3, local_rank=1))
        self.assertEqual(os.environ["LOCAL_SIZE"], "3")

    def test_a_launcher_s_own_value_is_kept(self):
        os.environ["LOCAL_SIZE"] = "8"
        world.launcher_environment(world.World(rank=0, world_size=2, local_rank=0))
        self.assertEqual(os.environ["LOCAL_SIZE"], "8")

    def test_a_started_group_has_it(self):
        # In a process of its own: start() initialises torch.distributed, which stays for the process.
        env = {k: v for k, v in os.environ.items()
               if k not in ("LOCAL_SIZE", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
        code = ("import os\nfrom zerocheck_ds.world import world\n"
                "w = world.from_environment()\nworld.start(w, True)\n"
                "print('LOCAL_SIZE', os.environ.get('LOCAL_SIZE'))\nworld.stop(w)\n")
        done = subprocess.run([sys.executable, "-c", code], cwd=TOP, env=dict(env, PYTHONPATH=TOP),
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr[-2000:])
        self.assertIn("LOCAL_SIZE 1", done.stdout)


class FrozenImports(unittest.TestCase):
    def test_the_function_freezes_and_counts(self):
        code = ("import gc, torch\nfrom zerocheck_ds.suite.heap import freeze_what_is_imported\n"
                "n = freeze_what_is_imported()\nprint('frozen', n, gc.get_freeze_count())\n")
        done = subprocess.run([sys.executable, "-c", code], cwd=TOP, env=dict(os.environ, PYTHONPATH=TOP),
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr[-2000:])
        _, counted, seen = done.stdout.split()
        self.assertEqual(counted, seen)
        self.assertGreater(int(counted), 10000, "torch alone makes tens of thousands of objects")

    def test_every_rank_of_a_suite_freezes_its_imports(self):
        with tempfile.TemporaryDirectory() as out:
            run = support.run_cli(["suite", "--adapter", "passthrough", "--world", "2", "--out", out,
                                   "--scenarios", support.good("experts_attr_mod")])
            self.assertEqual(run.returncode, 0, run.stdout[-3000:] + run.stderr[-3000:])
            logs = sorted(glob.glob(os.path.join(out, "logs", "rank*.log")))
            self.assertEqual(len(logs), 2, logs)
            for log in logs:
                with open(log, encoding="utf-8") as f:
                    self.assertRegex(f.read(), r"zerocheck_ds worker: [1-9]\d* objects of the imports frozen")

    def test_the_in_process_runner_freezes_its_imports(self):
        from unittest import mock
        from zerocheck_ds.suite import heap, runner
        with tempfile.TemporaryDirectory() as out, \
                mock.patch.object(heap, "freeze_what_is_imported", return_value=1) as frozen:
            status = runner.main(["--adapter", "passthrough", "--scenarios",
                                  support.good("name_collisions"), "--out", out])
        self.assertEqual(status, 0)
        frozen.assert_called_once_with()


if __name__ == "__main__":
    unittest.main()
