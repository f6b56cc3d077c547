"""Runs one share of the Python replay's tests, so that ctest -j runs the shares side by side.

    python3 tests/run_share.py worlds|reports|rest      (from harness/deepspeed)

`worlds`: the modules that start worlds of ranks on the stub DeepSpeed (the longest ones);
`reports`: the modules that run whole supervised suites and generated repro scripts;
`rest`: every other test module, found by discovery, so a new module is never left out.
"""

import os
import sys
import unittest

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # harness/deepspeed

SHARES = {
    "worlds": ("tests.test_suite", "tests.test_numerics"),
    "reports": ("tests.test_findings_report", "tests.test_repro_script", "tests.test_issue_drafts"),
}
NAMED = tuple(name for names in SHARES.values() for name in names)


def main(argv):
    if len(argv) != 1 or argv[0] not in (*SHARES, "rest"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    sys.path.insert(0, TOP)  # the test modules import as tests.*, and zerocheck_ds beside them
    loader = unittest.TestLoader()
    if argv[0] in SHARES:
        suite = loader.loadTestsFromNames(SHARES[argv[0]])
    else:
        suite = unittest.TestSuite(
            module_suite for module_suite in loader.discover(os.path.join(TOP, "tests"), top_level_dir=TOP)
            if not any(test_id.startswith(NAMED) for test_id in _ids(module_suite)))
    result = unittest.TextTestRunner(verbosity=1).run(suite)
    return 0 if result.wasSuccessful() else 1


def _ids(suite):
    for test in suite:
        if isinstance(test, unittest.TestSuite):
            yield from _ids(test)
        else:
            yield test.id()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
