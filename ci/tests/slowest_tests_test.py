#!/usr/bin/env python3
"""ci/slowest-tests on a log written by this machine's own ctest: a project of three tests that
take known, distinct times, read back slowest first; a build without a ctest log is exit 2."""

import os
import subprocess
import tempfile
import unittest

from ctest_project import CtestProject

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "slowest-tests")

PROJECT = """cmake_minimum_required(VERSION 3.20)
project(timed NONE)
enable_testing()
add_test(NAME quick COMMAND sh -c "true")
add_test(NAME slow COMMAND sh -c "sleep 1.5")
add_test(NAME middling COMMAND sh -c "sleep 0.6; exit 1")
"""


def run(*args):
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, timeout=60)


class SlowestTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.project = CtestProject("zerocheck-slowest-", PROJECT)
        cls.build = cls.project.build

    @classmethod
    def tearDownClass(cls):
        cls.project.cleanup()

    def test_the_slowest_come_first_and_n_bounds_the_list(self):
        result = run(self.build, "2")
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertIn("3 tests", lines[0])
        self.assertEqual([line.split()[-1] for line in lines[1:]], ["slow", "middling"])
        self.assertGreaterEqual(float(lines[1].split()[0]), 1.4)

    def test_a_build_without_a_ctest_log_is_bad_usage(self):
        with tempfile.TemporaryDirectory() as empty:
            result = run(empty)
        self.assertEqual(result.returncode, 2)
        self.assertIn("no ctest log", result.stderr)

    def test_a_count_that_is_not_a_number_is_bad_usage(self):
        result = run(self.build, "many")
        self.assertEqual(result.returncode, 2)
        self.assertIn("'many'", result.stderr)


if __name__ == "__main__":
    unittest.main()
