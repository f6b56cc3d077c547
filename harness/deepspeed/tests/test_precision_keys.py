"""DeepSpeed's precision keys in the scenario language (issue 40, item 1): the table comes from
schema.json (engine/config.h ZERO3_PRECISION_KEYS), the reader keeps what a scenario writes and
checks it as the C++ reader does, the adapter passes it to DeepSpeed, the report says which value
each key had and why, and the twin stops following where it does not compute a key yet."""

import unittest

from . import support  # noqa: F401  (puts zerocheck_ds on sys.path)
from zerocheck_ds.engines.deepspeed_adapter import PINNED_WHEN_ABSENT, deepspeed_config
from zerocheck_ds.model import twin
from zerocheck_ds.scenario import schema
from zerocheck_ds.scenario.config import precision_column, precision_in_effect, read_config
from zerocheck_ds.scenario.strict_json import ScenarioError

WRITTEN = {"bf16": {"enabled": True, "check_grad_overflow": False},
           "fp16": {"loss_scale": 0, "initial_scale_power": 4, "loss_scale_window": 2,
                    "hysteresis": 1, "min_loss_scale": 1, "consecutive_hysteresis": True},
           "data_types": {"grad_accum_dtype": "fp32"}, "communication_data_type": "bf16",
           "gradient_clipping": 0.5}


def error_of(config):
    with unittest.TestCase().assertRaises(ScenarioError) as caught:
        read_config(config, "$", 2)
    return str(caught.exception)


class Table(unittest.TestCase):
    def test_the_issue_s_keys_with_each_version_s_defaults(self):
        names = {schema.precision_key_name(k) for k in schema.PRECISION_KEYS}
        self.assertLessEqual({"bf16.enabled", "bf16.check_grad_overflow", "fp16.enabled",
                              "fp16.loss_scale", "fp16.initial_scale_power",
                              "fp16.loss_scale_window", "fp16.hysteresis", "fp16.min_loss_scale",
                              "data_types.grad_accum_dtype", "communication_data_type",
                              "gradient_clipping"}, names)
        self.assertEqual(set(schema.PRECISION_VERSIONS), {"v0.14.5", "master"})
        clip = next(k for k in schema.PRECISION_KEYS if k.name == "gradient_clipping")
        self.assertEqual(clip.defaults, {"v0.14.5": 0.0, "master": 1.0})
        overflow = next(k for k in schema.PRECISION_KEYS if k.name == "check_grad_overflow")
        self.assertEqual(overflow.defaults, {"v0.14.5": None, "master": True})
        self.assertIn("gradient_clipping", schema.some("config_keys", "gradient_clipping"))


class Reader(unittest.TestCase):
    def test_keeps_what_is_written_and_nothing_else(self):
        config, _ = read_config({}, "$", 2)
        for key in ("bf16", "fp16", "data_types", "communication_data_type", "gradient_clipping"):
            self.assertNotIn(key, config)
        config, _ = read_config(WRITTEN, "$", 2)
        for key, value in WRITTEN.items():
            self.assertEqual(config[key], value)

    def test_errors_name_the_path_as_the_cpp_reader_does(self):
        self.assertEqual(error_of({"gradient_clipping": -1}),
                         "$.gradient_clipping: value -1.0 is out of range [0.0, 1.7976931348623157e+308]")
        self.assertEqual(error_of({"communication_data_type": "fp8"}),
                         '$.communication_data_type: unknown value "fp8" (expected one of: fp32, fp16, bf16)')
        self.assertEqual(error_of({"fp16": {"hysteresis": 0}}),
                         "$.fp16.hysteresis: value 0 is out of range [1, 2147483647]")
        self.assertTrue(error_of({"bf16": {"enable": True}}).startswith("$.bf16.enable: unknown key"))
        self.assertTrue(error_of({"bf16": {"enabled": 1}}).startswith("$.bf16.enabled: expected a boolean"))


class Effect(unittest.TestCase):
    def test_the_adapter_passes_what_is_written_and_pins_clipping_off_otherwise(self):
        config, _ = read_config(WRITTEN, "$", 2)
        ds = deepspeed_config(config)
        self.assertEqual(ds["bf16"], WRITTEN["bf16"])
        self.assertEqual(ds["gradient_clipping"], 0.5)
        self.assertEqual(deepspeed_config(read_config({}, "$", 2)[0])["gradient_clipping"],
                         PINNED_WHEN_ABSENT["gradient_clipping"])

    def test_the_report_says_written_pinned_or_which_version_s_default(self):
        self.assertEqual(precision_column("0.14.5"), "v0.14.5")
        self.assertEqual(precision_column("0.18.4+edaa722"), "master")
        config, _ = read_config({"bf16": {"enabled": True}}, "$", 2)
        master = precision_in_effect(config, "0.18.4", PINNED_WHEN_ABSENT)
        self.assertEqual(master["bf16.enabled"], (True, "written"))
        self.assertEqual(master["gradient_clipping"], (0.0, "adapter"))
        self.assertEqual(master["bf16.check_grad_overflow"], (True, "default (master)"))
        old = precision_in_effect(config, "0.14.5")
        self.assertEqual(old["gradient_clipping"], (0.0, "default (v0.14.5)"))
        self.assertEqual(old["bf16.check_grad_overflow"], (None, "default (v0.14.5)"))
        self.assertEqual(set(old), {schema.precision_key_name(k) for k in schema.PRECISION_KEYS})

    def test_the_twin_stops_following_what_it_does_not_compute_yet(self):
        self.assertEqual(twin.precision_not_followed(deepspeed_config(read_config({}, "$", 2)[0])), ())
        config, _ = read_config(WRITTEN, "$", 2)
        # The clip is followed (twin.clip_gradients), and bf16 at ZeRO stage 3 at world <= 2
        # (twin.Precision), a bf16 or fp32 reduce and accumulation with it; not below stage 3.
        self.assertEqual(config["zero_optimization"]["stage"], 3)  # the scenario's default
        self.assertEqual(twin.precision_not_followed(config, world_size=2), ())
        self.assertEqual(twin.precision_not_followed(config, world_size=3),
                         ("bf16.enabled at world >= 3",))
        zero2 = dict(config, zero_optimization=dict(config["zero_optimization"], stage=2))
        self.assertEqual(twin.precision_not_followed(zero2), ("bf16.enabled below ZeRO stage 3",))
        fp16, _ = read_config({"fp16": {"enabled": True}}, "$", 2)
        self.assertEqual(twin.precision_not_followed(fp16), ("fp16.enabled",))
        fp32, _ = read_config({"bf16": {"enabled": False}, "communication_data_type": "fp32",
                               "data_types": {"grad_accum_dtype": "fp32"},
                               "gradient_clipping": 0.0}, "$", 2)
        self.assertEqual(twin.precision_not_followed(fp32), ())


if __name__ == "__main__":
    unittest.main()
