#!/usr/bin/env python3
"""ci/gtest-batches on real GoogleTest binaries built here: the cases a selection names run in
batches and pass, and a disabled one does not run; a failed case (a parameterised one too), a
crashed process, a case past its ctest TIMEOUT and a process silent outside any case each fail
the run, the case named and its output kept for ci/failed-test-output; the selection's other
tests run by ctest; bad usage is exit 2, --help exit 0."""

import os
import re
import subprocess
import time
import unittest

from ctest_project import CtestProject

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "gtest-batches")
FAILED_OUTPUT = os.path.join(HERE, "..", "failed-test-output")

PROJECT = """cmake_minimum_required(VERSION 3.20)
project(batches CXX)
enable_testing()
find_package(GTest REQUIRED)
include(GoogleTest)
foreach(name good bad crash hang exit_hang)
  add_executable(${name} ${name}.cc)
  target_link_libraries(${name} GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${name} PROPERTIES TIMEOUT 3 ENVIRONMENT "BATCH_MARK=from-ctest")
endforeach()
add_test(NAME script_writes_its_mark COMMAND sh -c "touch ${CMAKE_BINARY_DIR}/script-ran")
"""

GOOD = """#include <gtest/gtest.h>
#include <cstdlib>
#include <string>
TEST(Good, One) { EXPECT_EQ(1 + 1, 2); }
TEST(Good, SeesTheTestsEnvironment) {
  const char* mark = std::getenv("BATCH_MARK");
  ASSERT_NE(mark, nullptr);
  EXPECT_EQ(std::string(mark), "from-ctest");
}
TEST(Good, Skips) { GTEST_SKIP() << "skipped on purpose"; }
TEST(Good, DISABLED_FailsIfRun) { ADD_FAILURE() << "a disabled case was run"; }
class Sized : public testing::TestWithParam<int> {};
TEST_P(Sized, Holds) { EXPECT_GE(GetParam(), 0); }
INSTANTIATE_TEST_SUITE_P(Few, Sized, testing::Values(0, 1, 2, 3, 4, 5));
"""

BAD = """#include <gtest/gtest.h>
TEST(Bad, Passes) { SUCCEED(); }
TEST(Bad, Fails) { ADD_FAILURE() << "planted failure"; }
class Param : public testing::TestWithParam<int> {};
TEST_P(Param, FailsOnThree) { EXPECT_NE(GetParam(), 3) << "planted parameter failure"; }
INSTANTIATE_TEST_SUITE_P(Some, Param, testing::Values(2, 3));
"""

CRASH = """#include <gtest/gtest.h>
#include <cstdio>
#include <cstdlib>
TEST(Crash, Aborts) { std::puts("about to abort"); std::fflush(stdout); std::abort(); }
"""

HANG = """#include <gtest/gtest.h>
#include <chrono>
#include <thread>
TEST(Hang, SleepsPastItsTimeout) { std::this_thread::sleep_for(std::chrono::seconds(60)); }
"""


EXIT_HANG = """#include <gtest/gtest.h>
#include <chrono>
#include <thread>
// Only after the case ran: gtest_discover_tests lists the cases at build time, and must not hang.
bool ran = false;
struct SleepsAtExit {
  ~SleepsAtExit() { if (ran) std::this_thread::sleep_for(std::chrono::seconds(60)); }
} sleeper;
TEST(ExitHang, PassesThenHangsAtExit) { ran = true; }
"""


def passed_of(stdout):
    """(cases passed, cases run) summed over the batches' lines."""
    counts = [tuple(map(int, m.groups())) for m in re.finditer(r"(\d+)/(\d+) cases passed", stdout)]
    return sum(p for p, _ in counts), sum(n for _, n in counts)


def run(*args):
    return subprocess.run(["python3", SCRIPT, *args], capture_output=True, text=True, timeout=120)


class GtestBatches(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.project = CtestProject("zerocheck-batches-", PROJECT,
                                   {"good.cc": GOOD, "bad.cc": BAD, "crash.cc": CRASH, "hang.cc": HANG,
                                    "exit_hang.cc": EXIT_HANG},
                                   compile=True, run=False)
        cls.build = cls.project.build

    @classmethod
    def tearDownClass(cls):
        cls.project.cleanup()

    def failure_log(self):
        path = os.path.join(self.build, "Testing", "Temporary", "GtestBatchesFailed.log")
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as f:
            return f.read()

    def test_passing_cases_run_batched_with_their_environment_and_the_rest_by_ctest(self):
        marker = os.path.join(self.build, "script-ran")
        if os.path.exists(marker):
            os.remove(marker)
        result = run(self.build, "--jobs", "2", "-R", "^(Good|Few/Sized|script_)")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("9 GoogleTest cases in", result.stdout)
        self.assertEqual(passed_of(result.stdout), (9, 9), result.stdout)  # not the disabled case
        self.assertNotIn("FAILED", result.stdout)
        self.assertIn("1 other tests by ctest", result.stdout)
        self.assertTrue(os.path.exists(marker), "the script test was not run")
        self.assertIsNone(self.failure_log())

    def test_failed_cases_are_named_with_their_output_and_fail_the_run(self):
        result = run(self.build, "--jobs", "1", "-R", "^(Bad|Some/Param)")
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertEqual(passed_of(result.stdout), (2, 4), result.stdout)
        log = self.failure_log()
        self.assertIsNotNone(log)
        for expected in ("]: Bad.Fails\n", "planted failure",
                         "]: Some/Param.FailsOnThree/1\n", "planted parameter failure"):
            self.assertIn(expected, log)
        self.assertNotIn("Bad.Passes", log)
        shown = subprocess.run(["python3", FAILED_OUTPUT, self.build], capture_output=True, text=True, timeout=60)
        self.assertIn("planted parameter failure", shown.stdout)

    def test_a_crashed_process_fails_the_case_it_died_in(self):
        result = run(self.build, "-R", "^Crash")
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn("inside Crash.Aborts", result.stdout)
        self.assertIn("about to abort", self.failure_log())

    def test_a_case_past_its_timeout_is_killed_and_fails(self):
        began = time.monotonic()
        result = run(self.build, "-R", "^Hang")
        self.assertLess(time.monotonic() - began, 30, "the 3 s timeout was not applied")
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn("Hang.SleepsPastItsTimeout ran past its timeout (3 s)", result.stdout)

    def test_a_hang_outside_any_case_is_killed_and_fails(self):
        began = time.monotonic()
        result = run(self.build, "-R", "^ExitHang")
        self.assertLess(time.monotonic() - began, 30, "the silence outside the cases was not bounded")
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn("printed nothing for 3 s outside any case", result.stdout)

    def test_bad_usage_is_exit_2_and_help_exit_0(self):
        self.assertEqual(run().returncode, 2)
        helped = run("--help")
        self.assertEqual(helped.returncode, 0)
        self.assertIn("CTEST_SELECTION_ARGS", helped.stdout)
        self.assertEqual(run(os.path.join(self.build, "nowhere")).returncode, 2)
        wrong_jobs = run(self.build, "--jobs", "none")
        self.assertEqual(wrong_jobs.returncode, 2)
        self.assertIn("'none'", wrong_jobs.stderr)


if __name__ == "__main__":
    unittest.main()
