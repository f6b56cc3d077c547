"""Both scenario readers refuse every shared malformed fixture with the same line.

harness/tests/scenarios/malformed/EXPECTED.json gives, per file, the JSON path and the message
(or, for malformed JSON, whose detail is parser-specific, the message's start). The Python
reader must give exactly "path: message"; with ZEROCHECK_BIN set to the zerocheck binary,
`zerocheck validate FILE` must print "FILE: path: message" for each file too. The valid
scenarios next to them must read cleanly.
"""

import os
import subprocess
import unittest

from . import support
from zerocheck_ds.scenario.scenario import ScenarioError, load_scenario

VALID = os.path.join(os.path.dirname(support.MALFORMED), "valid")


def fixture_files():
    return sorted(n for n in os.listdir(support.MALFORMED)
                  if n.endswith(".json") and n != "EXPECTED.json")


class SharedFixtures(unittest.TestCase):
    def setUp(self):
        self.expected = support.malformed_expectations()

    def assert_line(self, got, row, what):
        line, prefix_only = support.expected_line(row)
        if prefix_only:
            self.assertTrue(got.startswith(line), f"{what}: {got!r} does not start with {line!r}")
        else:
            self.assertEqual(got, line, what)

    def test_expected_lists_every_fixture_and_only_those(self):
        self.assertEqual(sorted(self.expected), fixture_files())
        for name, row in self.expected.items():
            with self.subTest(name):
                self.assertTrue(row["path"].startswith("$"), row)
                self.assertEqual(len(row), 2, row)
                self.assertTrue({"message", "message_prefix"} & set(row), row)

    def test_python_reader_gives_the_expected_line(self):
        for name, row in self.expected.items():
            with self.subTest(name):
                with self.assertRaises(ScenarioError) as caught:
                    load_scenario(os.path.join(support.MALFORMED, name))
                self.assert_line(str(caught.exception), row, name)

    def test_valid_scenarios_read(self):
        for name in sorted(os.listdir(VALID)):
            if name.endswith(".json"):
                with self.subTest(name):
                    load_scenario(os.path.join(VALID, name))

    @unittest.skipUnless(os.environ.get("ZEROCHECK_BIN"), "ZEROCHECK_BIN (the zerocheck binary) is not set")
    def test_cpp_reader_gives_the_same_line(self):
        binary = os.environ["ZEROCHECK_BIN"]
        names = list(self.expected)
        paths = [os.path.join(support.MALFORMED, name) for name in names]
        # One process for every file: the binary's start-up (LibTorch) dominates otherwise.
        run = subprocess.run([binary, "validate", *paths], capture_output=True, text=True,
                             errors="replace", timeout=120)
        self.assertEqual(run.returncode, 2, run.stdout + run.stderr)
        lines = run.stdout.splitlines()
        self.assertEqual(len(lines), len(paths), run.stdout + run.stderr)
        for name, path, line in zip(names, paths, lines):
            with self.subTest(name):
                self.assert_line(line, dict(self.expected[name], path=f"{path}: {self.expected[name]['path']}"),
                                 name)
        valid = [os.path.join(VALID, n) for n in sorted(os.listdir(VALID)) if n.endswith(".json")]
        run = subprocess.run([binary, "validate", *valid], capture_output=True, text=True,
                             timeout=60)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertEqual(run.stdout.splitlines(), [f"{p}: ok" for p in valid])


if __name__ == "__main__":
    unittest.main()
