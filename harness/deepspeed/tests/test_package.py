"""The package face (issue 43): `--version`, the shipped corpus (`--corpus builtin`, `--only`),
its export equal to what the C++ export writes (ZEROCHECK_BIN), and the pytest plugin's items:
a finding fails with its report, a scenario in expected.json that passes shows as XPASS."""

import filecmp
import json
import os
import subprocess
import sys
import tempfile
import unittest

from tests.support import PACKAGE_ROOT

from zerocheck_ds.scenario import schema
from zerocheck_ds.scenario.scenario import load_scenario
from zerocheck_ds.suite import console

BUILTIN = os.path.join(console.CORPUS_ROOT, "builtin")


def _pytest_available():
    return subprocess.run([sys.executable, "-m", "pytest", "--version"],
                          capture_output=True).returncode == 0


class VersionTest(unittest.TestCase):
    def test_version_names_package_and_schema_format(self):
        done = subprocess.run([sys.executable, "-m", "zerocheck_ds", "--version"],
                              capture_output=True, text=True, cwd=PACKAGE_ROOT, check=True)
        self.assertIn(f"zerocheck-ds {console.VERSION}", done.stdout)
        self.assertIn(schema.FORMAT, done.stdout)

    def test_pyproject_reads_the_version_from_the_console_module(self):
        with open(os.path.join(PACKAGE_ROOT, "pyproject.toml"), encoding="utf-8") as f:
            text = f.read()
        self.assertIn('version = {attr = "zerocheck_ds.suite.console.VERSION"}', text)
        self.assertIn('zerocheck-ds = "zerocheck_ds.suite.console:main"', text)
        self.assertIn('zerocheck = "zerocheck_ds.suite.pytest_plugin"', text)


class CorpusTest(unittest.TestCase):
    def test_every_shipped_scenario_reads_and_names_are_unique(self):
        files = console.corpus_files("builtin")
        names = [os.path.basename(f)[:-5] for f in files]
        self.assertEqual(len(names), len(set(names)))
        self.assertGreaterEqual(len(files), 30)
        for path in files:
            with self.subTest(path=path):
                load_scenario(path)

    def test_only_picks_by_name_and_pattern_and_refuses_unknown_names(self):
        files = console.corpus_files("builtin", ["seed-bug", "random-000*"])
        self.assertEqual([os.path.basename(f) for f in files],
                         [f"random-000{i}.json" for i in range(8)] + ["seed-bug.json"])
        with self.assertRaises(SystemExit):
            console.corpus_files("builtin", ["no-such-scenario"])

    def test_suite_arguments_replace_corpus_by_scenarios(self):
        argv = console.suite_argv(["--corpus", "builtin", "--only=seed-bug", "--out", "x"])
        self.assertEqual(argv[0], "--scenarios")
        self.assertTrue(argv[1].endswith(os.path.join("export", "seed-bug.json")))
        self.assertEqual(argv[2:], ["--out", "x"])
        with self.assertRaises(SystemExit):
            console.suite_argv(["--corpus", "builtin", "--scenarios", "a.json"])

    def test_shipped_known_upstream_is_the_checkout_table(self):
        shipped = os.path.join(console.CORPUS_ROOT, "KNOWN_UPSTREAM.md")
        self.assertTrue(filecmp.cmp(shipped, os.path.join(PACKAGE_ROOT, "KNOWN_UPSTREAM.md"),
                                    shallow=False))

    def test_shipped_export_is_what_the_cpp_export_writes(self):
        """The corpus's export/ and export-manifest.json are `zerocheck export` with
        corpus.json's options, byte for byte; skipped (with the reason) without ZEROCHECK_BIN
        (the ctest `shipped_corpus_export` passes it and fails on a skip)."""
        zerocheck = os.environ.get("ZEROCHECK_BIN")
        if not zerocheck or not os.access(zerocheck, os.X_OK):
            self.skipTest("no zerocheck binary: set ZEROCHECK_BIN to build/dev/bin/zerocheck")
        with open(os.path.join(BUILTIN, "corpus.json"), encoding="utf-8") as f:
            corpus = json.load(f)
        with tempfile.TemporaryDirectory() as out:
            subprocess.run([zerocheck, *corpus["export"]["command"], "--out", out],
                           check=True, capture_output=True)
            written = sorted(os.listdir(os.path.join(out, "scenarios")))
            shipped_folder = os.path.join(BUILTIN, corpus["export"]["folder"])
            self.assertEqual(written, sorted(os.listdir(shipped_folder)),
                             "regenerate: harness/deepspeed/README.md, 'The shipped corpus'")
            for name in written:
                with self.subTest(name=name):
                    self.assertTrue(filecmp.cmp(os.path.join(out, "scenarios", name),
                                                os.path.join(shipped_folder, name),
                                                shallow=False),
                                    f"{name} differs from the C++ export: regenerate it")
            self.assertTrue(filecmp.cmp(os.path.join(out, "manifest.json"),
                                        os.path.join(BUILTIN, "export-manifest.json"),
                                        shallow=False))


@unittest.skipUnless(_pytest_available(), "no pytest for this Python (Debian: python3-pytest)")
class PytestPluginTest(unittest.TestCase):
    def _pytest(self, folder, *options):
        env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT, PYTHONDONTWRITEBYTECODE="1")
        for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(name, None)
        return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                               "-p", "zerocheck_ds.suite.pytest_plugin", "-rA",
                               "--zerocheck-corpus", "builtin", "--zerocheck-world", "1",
                               "--zerocheck-out", os.path.join(folder, "out"), *options],
                              cwd=folder, env=env, capture_output=True, text=True, timeout=600)

    def test_a_planted_fault_fails_with_its_report_and_a_clean_scenario_passes(self):
        with tempfile.TemporaryDirectory() as folder:
            done = self._pytest(folder, "--zerocheck-only", "seed-bug,random-0001",
                                "--zerocheck-args", "--adapter faulty --no-control")
            self.assertEqual(done.returncode, 1, done.stdout + done.stderr)
            self.assertRegex(done.stdout, r"(?m)^FAILED zerocheck::seed-bug")
            self.assertRegex(done.stdout, r"(?m)^PASSED zerocheck::random-0001")
            self.assertIn("root cause: I1", done.stdout)
            self.assertIn("expected: 0", done.stdout)
            self.assertIn("not triaged (a new root cause)", done.stdout)

    def test_an_expected_known_bug_that_passes_is_xpass(self):
        with tempfile.TemporaryDirectory() as folder:
            expected = os.path.join(folder, "expected.json")
            with open(expected, "w", encoding="utf-8") as f:
                json.dump({"versions": {"": {"random-0001": ["a known root cause"]}}}, f)
            done = self._pytest(folder, "--zerocheck-only", "random-0001",
                                "--zerocheck-args", "--adapter passthrough",
                                "--zerocheck-expected", expected)
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
            self.assertRegex(done.stdout, r"(?m)^XPASS zerocheck::random-0001")

    def test_only_the_corpus_is_collected_unless_paths_are_given(self):
        """A CI workspace holds DeepSpeed checkouts: their tests are not the corpus's run."""
        with tempfile.TemporaryDirectory() as folder:
            os.makedirs(os.path.join(folder, "checkout"))
            with open(os.path.join(folder, "checkout", "test_other.py"), "w",
                      encoding="utf-8") as f:
                f.write("def test_other():\n    assert False\n")
            options = ("--zerocheck-only", "random-0001", "--zerocheck-args",
                       "--adapter passthrough --no-control")
            done = self._pytest(folder, *options)
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
            self.assertRegex(done.stdout, r"(?m)^PASSED zerocheck::random-0001")
            self.assertNotIn("test_other", done.stdout)
            done = self._pytest(folder, *options, "checkout")
            self.assertEqual(done.returncode, 1, done.stdout + done.stderr)
            self.assertRegex(done.stdout, r"(?m)^FAILED checkout/test_other.py::test_other")
            self.assertRegex(done.stdout, r"(?m)^PASSED zerocheck::random-0001")


if __name__ == "__main__":
    unittest.main()
