#!/usr/bin/env python3
"""ci/failed-test-output on logs written by this machine's own ctest (the lanes have two ctest
versions): a project of one passing and two failing tests, one with a long output."""

import os
import subprocess
import sys
import tempfile
import unittest

from ctest_project import CtestProject

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "failed-test-output")

PROJECT = """cmake_minimum_required(VERSION 3.20)
project(failing NONE)
enable_testing()
add_test(NAME passes COMMAND sh -c "echo all good")
add_test(NAME fails_long COMMAND sh -c "seq 1 100; echo the-reason >&2; exit 3")
add_test(NAME fails_short COMMAND sh -c "echo short-reason; exit 1")
"""


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=60)


class FailedTestOutput(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.project = CtestProject("zerocheck-failed-output-", PROJECT)
        cls.build = cls.project.build
        assert cls.project.ctest.returncode != 0, cls.project.ctest.stdout  # two tests fail

    @classmethod
    def tearDownClass(cls):
        cls.project.cleanup()

    def test_names_each_failed_test_with_the_end_of_its_output(self):
        done = run(self.build, "--lines", "5")
        self.assertEqual(done.returncode, 0, done.stderr)
        out = done.stdout
        self.assertIn("2 failed test(s)", out)
        self.assertIn("===== fails_long:", out)
        self.assertIn("===== fails_short:", out)
        self.assertNotIn("===== passes", out)
        self.assertIn("the-reason", out)  # stderr is in ctest's log too
        self.assertIn("short-reason", out)
        self.assertIn("96 lines before", out)  # 100 numbers and the reason: 101 lines, 5 kept
        self.assertNotIn("\n50\n", out)
        self.assertIn("Failed", out)  # the closing status line

    def test_no_failure_is_a_note(self):
        with tempfile.TemporaryDirectory() as empty:
            done = run(empty)
        self.assertEqual(done.returncode, 0)
        self.assertIn("no failed test recorded", done.stdout)

    def test_bad_usage_exits_2(self):
        for args in ([], ["--lines", "3"], [self.build, "--lines", "x"], [self.build, "--nope", "3"]):
            with self.subTest(args=args):
                done = run(*args)
                self.assertEqual(done.returncode, 2)
                self.assertIn("failed-test-output BUILD_DIR", done.stderr)


if __name__ == "__main__":
    unittest.main()
