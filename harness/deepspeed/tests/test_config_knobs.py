"""DeepSpeed's ZeRO knobs in a scenario's config (scenario/config.py, from schema.json): their
defaults, values and errors, and what a repro script's config leaves out."""

import unittest

from . import support  # noqa: F401  (puts zerocheck_ds on sys.path)
from zerocheck_ds.repro.repro_straight import DEEPSPEED_DEFAULTS
from zerocheck_ds.scenario import schema
from zerocheck_ds.scenario.config import read_config
from zerocheck_ds.scenario.strict_json import ScenarioError


def zero_defaults():
    config, _ = read_config({}, "$", 2)
    return config["zero_optimization"]


class ConfigReader(unittest.TestCase):
    def test_defaults_and_values_of_the_knobs(self):
        zero = zero_defaults()
        self.assertEqual(zero["stage3_prefetch_bucket_size"], 50000000)
        self.assertIs(zero["overlap_comm"], True)
        self.assertIs(zero["round_robin_gradients"], False)
        config, _ = read_config({"zero_optimization": {"sub_group_size": 0, "reduce_scatter": False}}, "$", 2)
        self.assertEqual(config["zero_optimization"]["sub_group_size"], 0)
        self.assertIs(config["zero_optimization"]["reduce_scatter"], False)

    def test_errors_name_the_key_and_value(self):
        with self.assertRaisesRegex(ScenarioError, r"^\$\.zero_optimization\.stage3_max_live_parameters: value -1"):
            read_config({"zero_optimization": {"stage3_max_live_parameters": -1}}, "$", 2)
        with self.assertRaisesRegex(ScenarioError, r"^\$\.zero_optimization\.overlap_comm: expected a boolean"):
            read_config({"zero_optimization": {"overlap_comm": 1}}, "$", 2)

    def test_every_knob_reaches_deepspeed_as_written(self):
        # The effective config is what the adapters get (deepspeed_adapter.deepspeed_config):
        # every knob, default or not; a script leaves out only DeepSpeed's own defaults.
        zero = zero_defaults()
        knobs = {k.name for k in schema.CONFIG_ZERO_KEYS + schema.CONFIG_ZERO_FLAGS}
        self.assertEqual(set(zero), knobs)
        for path in DEEPSPEED_DEFAULTS:
            if path[0] == "zero_optimization":
                self.assertEqual(zero[path[1]], DEEPSPEED_DEFAULTS[path], path)


if __name__ == "__main__":
    unittest.main()
