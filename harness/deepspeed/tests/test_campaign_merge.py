"""`zerocheck_ds merge` (suite/campaign_merge.py) on shards' campaign folders written by hand: the
root causes' union with counts added up and the earlier shard's time to find, the limit of the
replay when a shard's control showed it, and the usage errors (another setting, a shard twice, a
file in two shards, a campaign on the merge). ctest `upstream_campaign` merges real shards."""

import contextlib
import io
import json
import os
import tempfile
import unittest

from zerocheck_ds.suite import campaign, campaign_merge
from zerocheck_ds.suite.runner import UsageError


def cause(seconds, scenarios, first, seen, signatures, **more):
    return {"invariant": "I1", "first_scenario": first, "found_after_seconds": seconds,
            "found_after_scenarios": scenarios, "scenarios": seen, "signatures": signatures,
            "triaged": False, "bug": None, **more}


def shard_state(shard, causes, scenarios=10, seed=1):
    return {"format": campaign.FORMAT, "seed": seed, "shard": shard, "world": 2, "stage": 3,
            "adapter": "faulty", "version": "v", "next": 0, "scenarios": scenarios,
            "scenarios_with_findings": len(causes), "seconds": 30.0, "causes": causes}


class MergeTest(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.TemporaryDirectory()
        self.addCleanup(self.work.cleanup)

    def folder(self, name, state, scenarios=()):
        path = os.path.join(self.work.name, name)
        os.makedirs(os.path.join(path, "scenarios"))
        os.makedirs(os.path.join(path, "verdicts"))
        campaign.save_state(path, state)
        for scenario in scenarios:
            with open(os.path.join(path, "scenarios", scenario + ".json"), "w") as f:
                f.write("{}")
        return path

    def merge(self, *folders):
        out = os.path.join(self.work.name, "merged")
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            code = campaign_merge.main(["--out", out, *folders])
        return code, stderr.getvalue(), out

    def test_union_sums_and_the_earlier_time_to_find(self):
        a = self.folder("a", shard_state("0/2", {
            "both": cause(20.0, 4, "random-0003", 2, ["s1"], limit=False),
            "only a": cause(5.0, 1, "random-0000", 1, ["s2"])}), ["random-0000", "random-0003"])
        b = self.folder("b", shard_state("1/2", {
            "both": cause(8.0, 2, "random-1000000001", 3, ["s3"], limit=True)},
            scenarios=7), ["random-1000000001"])
        code, stderr, out = self.merge(a, b)
        with open(os.path.join(out, "campaign.json")) as f:
            merged = json.load(f)
        self.assertEqual(merged["format"], campaign.MERGE_FORMAT)
        self.assertEqual(set(merged["causes"]), {"both", "only a"})
        both = merged["causes"]["both"]
        self.assertEqual((both["found_after_seconds"], both["first_scenario"], both["shard"]),
                         (8.0, "random-1000000001", "1/2"))
        self.assertEqual((both["scenarios"], both["signatures"], both["limit"]),
                         (5, ["s1", "s3"], True))
        self.assertNotIn("limit", merged["causes"]["only a"])
        self.assertEqual((merged["scenarios"], merged["seconds"]), (17, 60.0))
        self.assertEqual(sorted(os.listdir(os.path.join(out, "scenarios"))),
                         ["random-0000.json", "random-0003.json", "random-1000000001.json"])
        self.assertEqual(code, campaign.EXIT_FINDING)
        self.assertIn("untriaged root cause: only a", stderr)
        with open(os.path.join(out, "campaign.md")) as f:
            self.assertIn("scenarios/random-1000000001.json (shard 1/2)", f.read())

    def test_usage_errors_name_what_differs(self):
        a = self.folder("a", shard_state("0/2", {}), ["random-0000"])
        for name, state, scenarios, said in (
                ("seed", shard_state("1/2", {}, seed=2), [], "seed 2"),
                ("split", shard_state("1/3", {}), [], "shard count '3'"),
                ("twice", shard_state("0/2", {}), [], "duplicate shard 0/2"),
                ("clash", shard_state("1/2", {}), ["random-0000"], "random-0000.json is in both")):
            code, stderr, _ = self.merge(a, self.folder(name, state, scenarios))
            self.assertEqual(code, campaign.EXIT_USAGE, name)
            self.assertIn(said, stderr, name)

    def test_a_merge_is_not_a_campaign_to_resume(self):
        a = self.folder("a", shard_state("0/2", {}))
        b = self.folder("b", shard_state("1/2", {}))
        code, _, out = self.merge(a, b)
        self.assertEqual(code, campaign.EXIT_OK)
        with self.assertRaisesRegex(UsageError, "is a merge of the campaigns of shards 0/2, 1/2"):
            campaign.read_state(out)
        self.assertEqual(self.merge(a, b)[0], campaign.EXIT_OK)  # an earlier merge is replaced


if __name__ == "__main__":
    unittest.main()
