"""seeded.py against the golden values both languages are held to.

The fixture (harness/tests/fixtures/seeded_values.json) is read by this test and by the C++ test
SeededValues.* (engine/tests/seeded_values_test.cc): the same bits on both sides, so a scenario
means the same numbers in C++ and in Python. Its anchors are the published reference outputs of
splitmix64 and FNV-1a 64; the values were written by this file's --write-fixture, from the
pure-Python rule, and must never be regenerated to make a failing side pass.
"""

import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from zerocheck_ds.model import seeded  # noqa: E402

FIXTURE = os.path.join(HERE, os.pardir, os.pardir, "tests", "fixtures", "seeded_values.json")

# (seed, stream, key source, count, bound source): the streams the fixture pins.
_CASES = [
    (0, "parameter", {"path": "weight"}, 6, {"fan_in": 1}),
    (7, "parameter", {"path": "0.linear.weight"}, 6, {"fan_in": 4}),
    (7, "parameter", {"path": "2.experts.1.linear.bias"}, 6, {"fan_in": 3}),
    (9223372036854775807, "parameter", {"path": "1.value"}, 6, {"fan_in": 64}),
    (5, "input", {"op_index": 0, "rank": 0}, 6, {"bound": 1.0}),
    (5, "input", {"op_index": 3, "rank": 1}, 6, {"bound": 1.0}),
    (5, "target", {"op_index": 3, "rank": 1}, 6, {"bound": 1.0}),
    (5, "probe_input", {"op_index": 1023, "rank": 7}, 6, {"bound": 1.0}),
]


def _key(source):
    if "path" in source:
        return seeded.parameter_key(source["path"])
    return seeded.data_key(source["op_index"], source["rank"])


def _bound(source):
    return seeded.parameter_bound(source["fan_in"]) if "fan_in" in source else source["bound"]


def _write_fixture():
    values = []
    for seed, stream, key, count, bound in _CASES:
        base = seeded.stream_base(seed, stream, _key(key))
        indices = list(range(count)) + [1000, 65535]
        values.append({"seed": seed, "stream": stream, **key, **bound, "base": f"{base:#018x}",
                       "indices": indices,
                       "bits": [f"{seeded.float32_bits(seeded.value(base, i, _bound(bound))):#010x}"
                                for i in indices]})
    fixture = {
        "rule": "harness/SCENARIO_FORMAT.md, section Numbers; engine/seeded_values.h; "
                "harness/deepspeed/zerocheck_ds/model/seeded.py",
        # Published reference outputs: splitmix64 started at 0 (Vigna's splitmix64.c), FNV-1a 64
        # test vectors (Fowler, Noll, Vo).
        "splitmix64": [{"state": "0x0000000000000000", "output": "0xe220a8397b1dcdaf"},
                       {"state": "0x9e3779b97f4a7c15", "output": "0x6e789e6aa1b965f4"}],
        "fnv1a64": [{"text": "", "hash": "0xcbf29ce484222325"},
                    {"text": "a", "hash": "0xaf63dc4c8601ec8c"},
                    {"text": "foobar", "hash": "0x85944171f73967e8"}],
        "streams": {name: tag for name, (tag, _) in seeded.STREAMS.items()},
        "parameter_bounds": [{"fan_in": f, "bits": f"{seeded.float32_bits(seeded.parameter_bound(f)):#010x}"}
                             for f in (0, 1, 2, 3, 4, 7, 64)],
        "values": values,
    }
    with open(FIXTURE, "w", encoding="utf-8") as f:
        json.dump(fixture, f, indent=1)
        f.write("\n")


class SeededValues(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(FIXTURE, encoding="utf-8") as f:
            cls.fixture = json.load(f)

    def test_the_primitives_give_the_published_reference_outputs(self):
        for case in self.fixture["splitmix64"]:
            self.assertEqual(seeded.splitmix64(int(case["state"], 16)), int(case["output"], 16))
        for case in self.fixture["fnv1a64"]:
            self.assertEqual(seeded.fnv1a64(case["text"]), int(case["hash"], 16), case["text"])

    def test_stream_tags_are_the_fixture_s(self):
        self.assertEqual({n: t for n, (t, _) in seeded.STREAMS.items()}, self.fixture["streams"])

    def test_parameter_bounds(self):
        for case in self.fixture["parameter_bounds"]:
            self.assertEqual(f"{seeded.float32_bits(seeded.parameter_bound(case['fan_in'])):#010x}",
                             case["bits"], case)

    def test_pure_rule_gives_the_golden_bits(self):
        for case in self.fixture["values"]:
            base = seeded.stream_base(case["seed"], case["stream"], _key(case))
            self.assertEqual(f"{base:#018x}", case["base"], case)
            got = [f"{seeded.float32_bits(seeded.value(base, i, _bound(case))):#010x}"
                   for i in case["indices"]]
            self.assertEqual(got, case["bits"], case)

    def test_tensor_rule_gives_the_golden_bits(self):
        import torch  # noqa: F401 - the vectorised path

        for case in self.fixture["values"]:
            base = int(case["base"], 16)
            n = max(case["indices"]) + 1
            tensor = seeded.seeded_tensor((n,), base, _bound(case))
            got = [f"{seeded.float32_bits(tensor[i].item()):#010x}" for i in case["indices"]]
            self.assertEqual(got, case["bits"], case)

    def test_tensor_rule_equals_the_pure_rule_everywhere_on_a_long_stream(self):
        base = seeded.stream_base(3, "parameter", seeded.parameter_key("0.weight"))
        bound = seeded.parameter_bound(5)
        tensor = seeded.seeded_tensor((4097,), base, bound)
        self.assertEqual(tensor.tolist(), [seeded.value(base, i, bound) for i in range(4097)])

    def test_values_cover_the_interval_and_differ_between_streams(self):
        base = seeded.stream_base(1, "input", seeded.data_key(0, 0))
        values = seeded.seeded_tensor((10000,), base, 1.0)
        self.assertGreaterEqual(values.min().item(), -1.0)
        self.assertLess(values.max().item(), 1.0)
        self.assertLess(abs(values.mean().item()), 0.05)
        other = seeded.seeded_tensor((10000,), seeded.stream_base(1, "target", seeded.data_key(0, 0)), 1.0)
        self.assertFalse(bool((values == other).all()))


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-fixture"]:
        _write_fixture()
    else:
        unittest.main()
