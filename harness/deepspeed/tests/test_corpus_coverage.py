"""The shipped corpus covers the scenario language (issue 43, item 2): every operation, operation
key, config key, config error, node kind and key, construction, placement kind and optimizer of
schema.json is held by a scenario of corpus/builtin or left out in corpus.json's "coverage" with
its reason; every catalogued upstream bug names the corpus scenario that shows it, or why none
does. The listing is `zerocheck-ds corpus --coverage` (scenario/corpus_coverage.py)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from tests.support import PACKAGE_ROOT

from zerocheck_ds.scenario import corpus_coverage, schema
from zerocheck_ds.scenario.strict_json import ScenarioError
from zerocheck_ds.suite import console

BUILTIN = os.path.join(console.CORPUS_ROOT, "builtin")
CATALOGUE = os.path.join(PACKAGE_ROOT, "catalogue")


def _scenario(ops, config=None, tree=None):
    return {"format": schema.FORMAT, "world_size": 2, "seed": 1, "features": 4, "batch": 2,
            "optimizer": {"kind": "sgd", "lr": 0.1},
            "config": config or {"zero_optimization": {"stage": 3}},
            "tree": tree or [{"kind": "Linear"}], "ops": ops}


def _write(folder, name, doc):
    path = os.path.join(folder, f"{name}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    return path


class ShippedCorpus(unittest.TestCase):
    def test_every_item_of_the_schema_is_covered_or_excluded_with_a_reason(self):
        result = console.corpus_coverage("builtin")
        self.assertTrue(result.complete(),
                        "the shipped corpus misses items of the scenario schema: add a scenario "
                        "to corpus/builtin/upstream/ or an exclusion with its reason to "
                        "corpus.json's \"coverage\"\n" + corpus_coverage.listing(result))
        for category in corpus_coverage.CATEGORIES:
            for item, why in {**result.excluded[category], **result.not_run[category]}.items():
                self.assertGreater(len(why.strip()), 10, f"{category} {item}: no reason given")

    def test_the_listing_names_every_operation_and_config_key(self):
        listing = corpus_coverage.listing(console.corpus_coverage("builtin"))
        for op in schema.OPS:
            self.assertIn(f"covered   {op} (", listing)
        for key in schema.PRECISION_KEYS:
            self.assertIn(f" {schema.precision_key_name(key)} (", listing)
        self.assertIn("zero_optimization.contiguous_gradients", listing)

    def test_every_catalogued_bug_has_its_corpus_scenario_or_a_reason(self):
        if not os.path.isdir(CATALOGUE):
            self.skipTest("no catalogue: an installed package, not the checkout")
        bugs = sorted(name for name in os.listdir(CATALOGUE)
                      if os.path.isfile(os.path.join(CATALOGUE, name, "catalogue.json")))
        mapping = console.corpus_manifest("builtin")["catalogue"]
        self.assertEqual(sorted([*mapping["scenarios"], *mapping["none"]]), bugs)
        names = {os.path.basename(p)[:-5] for p in console.corpus_files("builtin")}
        for bug, scenario in mapping["scenarios"].items():
            self.assertIn(scenario, names, f"{bug}: {scenario} is not a corpus scenario")
        for bug, why in mapping["none"].items():
            self.assertGreater(len(why.strip()), 10, f"{bug}: no reason given")

    def test_the_command_prints_the_listing_and_exits_0_when_complete(self):
        done = subprocess.run([sys.executable, "-m", "zerocheck_ds", "corpus", "--coverage"],
                              capture_output=True, text=True, cwd=PACKAGE_ROOT)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("complete", done.stdout.splitlines()[0])
        done = subprocess.run([sys.executable, "-m", "zerocheck_ds", "corpus", "builtin",
                               "--coverage", "--json"],
                              capture_output=True, text=True, cwd=PACKAGE_ROOT, check=True)
        report = json.loads(done.stdout)
        self.assertTrue(report["complete"])
        self.assertEqual(set(report["categories"]), set(corpus_coverage.CATEGORIES))
        done = subprocess.run([sys.executable, "-m", "zerocheck_ds", "corpus"],
                              capture_output=True, text=True, cwd=PACKAGE_ROOT)
        self.assertEqual(done.returncode, 2)


class Listing(unittest.TestCase):
    """coverage() on small corpora: what counts as covered, missing and stale."""

    def setUp(self):
        self.folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.folder)

    def test_written_keys_count_defaults_left_out_do_not(self):
        path = _write(self.folder, "a", _scenario(
            [{"op": "initialize"}, {"op": "set_attr", "module": "", "name": "id", "value": 1},
             {"op": "load", "world_size": 3}],
            config={"gradient_clipping": 0.5, "bf16": {"enabled": False},
                    "zero_optimization": {"stage": 3, "reduce_scatter": False}}))
        result = corpus_coverage.coverage([path])
        self.assertEqual(result.covered["operations"], {"initialize": ["a"], "set_attr": ["a"],
                                                        "load": ["a"]})
        self.assertIn("set_attr.module", result.covered["op_keys"])
        self.assertIn("set_attr.param", result.missing["op_keys"])
        self.assertIn("load.world_size", result.covered["op_keys"])
        self.assertNotIn("initialize.optimizer", result.covered["op_keys"])  # left out
        self.assertEqual(result.covered["initialize_optimizers"], {"same": ["a"]})
        self.assertIn("bf16.enabled", result.covered["config_keys"])
        self.assertEqual(result.values["zero_optimization.reduce_scatter"], ["false"])
        self.assertIn("zero_optimization.contiguous_gradients", result.missing["config_keys"])
        self.assertIn("train_micro_batch_size_per_gpu", result.missing["config_keys"])
        self.assertEqual(result.covered["constructions"], {"eager": ["a"]})
        self.assertFalse(result.complete())

    def test_exclusions_set_items_apart_and_stale_ones_are_gaps(self):
        path = _write(self.folder, "a", _scenario([{"op": "forward"}]))
        result = corpus_coverage.coverage([path], {
            "excluded": {"operations": {"gather": "why", "forward": "held", "jump": "no such"}},
            "not_run": {"operations": {"forward": "a note", "save": "not held"}}})
        self.assertEqual(result.excluded["operations"], {"gather": "why"})
        self.assertNotIn("gather", result.missing["operations"])
        self.assertEqual(result.not_run["operations"], {"forward": "a note"})
        self.assertEqual(set(result.stale["operations"]), {"forward", "jump", "save (not_run)"})
        self.assertIn("STALE     exclusion of jump", corpus_coverage.listing(result))
        with self.assertRaises(ValueError):
            corpus_coverage.coverage([path], {"excluded": {"opcodes": {}}})

    def test_an_invalid_scenario_is_refused_with_its_file(self):
        path = _write(self.folder, "bad", _scenario([{"op": "jump"}]))
        with self.assertRaises(ScenarioError) as caught:
            corpus_coverage.coverage([path])
        self.assertIn("bad.json", str(caught.exception))

    def test_a_corpus_without_a_scenario_of_an_operation_has_a_gap(self):
        # The builtin corpus less the scenarios that hold set_attr: the gap the test above catches.
        copy = os.path.join(self.folder, "corpus")
        shutil.copytree(BUILTIN, copy)
        for path in console.corpus_files(copy):
            with open(path, encoding="utf-8") as f:
                if '"set_attr"' in f.read():
                    os.remove(path)
        result = console.corpus_coverage(copy)
        self.assertFalse(result.complete())
        self.assertIn("set_attr", result.missing["operations"])
        self.assertIn("MISSING   set_attr", corpus_coverage.listing(result))


if __name__ == "__main__":
    unittest.main()
