#include <gtest/gtest.h>

#include "engine/config.h"
#include "engine/errors.h"

#include <nlohmann/json.hpp>

namespace zero3 {
namespace {

// Returns the ConfigError message for `text`, failing the test when it parses.
std::string error_of(const std::string& text) {
  try {
    Config::parse(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << text;
  return {};
}

TEST(Config, ParsesTheSeedConfig) {
  Config c = Config::parse(R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
      "steps_per_print": 1, "zero_optimization": {"stage": 3}})");
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 1);
  EXPECT_EQ(c.steps_per_print, 1);
  EXPECT_EQ(c.zero_optimization.stage, 3);
  EXPECT_EQ(c.zero_optimization.stage3_param_persistence_threshold, 100000);
}

TEST(Config, RoundTripsThroughJson) {
  Config c = Config::parse(
      R"({"gradient_accumulation_steps": 4, "zero_optimization": {"stage": 3,
          "stage3_param_persistence_threshold": 0, "reduce_bucket_size": 1000}})");
  Config again = Config::from_json(c.to_json());
  EXPECT_EQ(again.to_json(), c.to_json());
  EXPECT_EQ(again.gradient_accumulation_steps, 4);
  EXPECT_EQ(again.zero_optimization.reduce_bucket_size, 1000);
}

TEST(Config, ErrorsNameTheJsonPathInTheOneConvention) {
  // The convention and the texts of engine/json_reader.h, shared with the scenario readers.
  EXPECT_EQ(error_of(R"({"zero_optimization": {"stage": 2}})"), "$.zero_optimization.stage: value 2 is out of range [3, 3]");
  EXPECT_EQ(error_of(R"({"zero_optimization": {"stag": 3}})"),
            "$.zero_optimization.stag: unknown key (expected one of: stage, stage3_param_persistence_threshold, "
            "reduce_bucket_size, allgather_bucket_size, stage3_prefetch_bucket_size, stage3_max_live_parameters, "
            "stage3_max_reuse_distance, sub_group_size, overlap_comm, contiguous_gradients, reduce_scatter, "
            "round_robin_gradients, offload_optimizer)");
  EXPECT_EQ(error_of(R"({"train_micro_batch_size": 1})").rfind("$.train_micro_batch_size: unknown key (expected one of: "
                                                                "train_micro_batch_size_per_gpu,", 0), 0u);
  EXPECT_EQ(error_of(R"({"steps_per_print": true})"), "$.steps_per_print: expected an integer, got boolean");
  EXPECT_EQ(error_of(R"({"steps_per_print": 1.5})"), "$.steps_per_print: expected an integer, got number");
  EXPECT_EQ(error_of(R"({"steps_per_print": "1"})"), "$.steps_per_print: expected an integer, got string");
  EXPECT_EQ(error_of(R"({"gradient_accumulation_steps": 0})"),
            "$.gradient_accumulation_steps: value 0 is out of range [1, 2147483647]");
  EXPECT_EQ(error_of(R"({"zero_optimization": {"stage3_param_persistence_threshold": -1}})")
                .rfind("$.zero_optimization.stage3_param_persistence_threshold: value -1 is out of range", 0), 0u);
  EXPECT_EQ(error_of(R"({"zero_optimization": {"reduce_bucket_size": 18446744073709551615}})")
                .rfind("$.zero_optimization.reduce_bucket_size: value 18446744073709551615 is out of range", 0), 0u);
  EXPECT_EQ(error_of(R"({"zero_optimization": 3})"), "$.zero_optimization: expected an object, got integer");
  EXPECT_EQ(error_of(R"({"zerocheck": {"placement": {"kind": "map", "owners": {"a.b": "1"}}}})"),
            R"($.zerocheck.placement.owners["a.b"]: expected an integer, got string)");
  EXPECT_EQ(error_of("[1, 2]"), "$: expected an object, got array");
  EXPECT_EQ(error_of("{\"stage\": ").rfind("$: malformed JSON: at byte", 0), 0u);
  EXPECT_EQ(error_of("").rfind("$: malformed JSON", 0), 0u);
}

TEST(Config, DeepSpeedsZeroKnobsHaveItsNamesDefaultsAndRanges) {
  // deepspeed/runtime/zero/config.py (v0.14.5 and master alike): every size `ge=0`, these defaults,
  // overlap_comm true at stage 3. The engine validates them and ignores them (engine/config.h).
  const Config defaults = Config::parse("{}");
  EXPECT_EQ(defaults.zero_optimization.reduce_bucket_size, 500000000);
  EXPECT_EQ(defaults.zero_optimization.allgather_bucket_size, 500000000);
  EXPECT_EQ(defaults.zero_optimization.stage3_prefetch_bucket_size, 50000000);
  EXPECT_EQ(defaults.zero_optimization.stage3_max_live_parameters, 1000000000);
  EXPECT_EQ(defaults.zero_optimization.stage3_max_reuse_distance, 1000000000);
  EXPECT_EQ(defaults.zero_optimization.sub_group_size, 1000000000);
  EXPECT_TRUE(defaults.zero_optimization.overlap_comm);
  EXPECT_TRUE(defaults.zero_optimization.contiguous_gradients);
  EXPECT_TRUE(defaults.zero_optimization.reduce_scatter);
  EXPECT_FALSE(defaults.zero_optimization.round_robin_gradients);

  const Config set = Config::parse(R"({"zero_optimization": {"reduce_bucket_size": 0, "allgather_bucket_size": 7,
      "stage3_prefetch_bucket_size": 0, "stage3_max_live_parameters": 3, "stage3_max_reuse_distance": 0,
      "sub_group_size": 5, "overlap_comm": false, "contiguous_gradients": false, "reduce_scatter": false,
      "round_robin_gradients": true}})");
  EXPECT_EQ(set.zero_optimization.stage3_max_live_parameters, 3);
  EXPECT_FALSE(set.zero_optimization.reduce_scatter);
  EXPECT_TRUE(set.zero_optimization.round_robin_gradients);
  EXPECT_EQ(Config::from_json(set.to_json()).to_json(), set.to_json());
  EXPECT_NO_THROW(set.validate(2));

  EXPECT_EQ(error_of(R"({"zero_optimization": {"stage3_max_live_parameters": -1}})")
                .rfind("$.zero_optimization.stage3_max_live_parameters: value -1 is out of range [0, ", 0), 0u);
  EXPECT_EQ(error_of(R"({"zero_optimization": {"sub_group_size": -5}})")
                .rfind("$.zero_optimization.sub_group_size: value -5 is out of range [0, ", 0), 0u);
  EXPECT_EQ(error_of(R"({"zero_optimization": {"overlap_comm": 1}})"),
            "$.zero_optimization.overlap_comm: expected a boolean, got integer");
  Config bad;
  bad.zero_optimization.stage3_prefetch_bucket_size = -2;
  try {
    bad.validate(1);
    ADD_FAILURE() << "a negative prefetch bucket validated";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("$.zero_optimization.stage3_prefetch_bucket_size: value -2 is out of range", 0), 0u)
        << e.what();
  }
  EXPECT_NE(Config::describe_keys().find("zero_optimization.overlap_comm (default true): "), std::string::npos);
}

TEST(Config, RefusesAKeyWrittenTwiceAnywhere) {
  // nlohmann would keep the last one silently; DeepSpeed's json.load does too.
  EXPECT_EQ(error_of(R"({"steps_per_print": 1, "steps_per_print": 2})"), "$.steps_per_print: duplicate key");
  EXPECT_EQ(error_of(R"({"zero_optimization": {"stage": 3, "stage": 3}})"), "$.zero_optimization.stage: duplicate key");
  EXPECT_EQ(error_of(R"({"zerocheck": {"placement": {"kind": "map", "owners": {"x": 0, "y": [1, {"z": 1, "z": 2}]}}}})"),
            R"($.zerocheck.placement.owners.y[1].z: duplicate key)");
}

TEST(Config, TrainBatchSizeMustAgreeWithTheWorld) {
  Config c = Config::parse(R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2})");
  EXPECT_NO_THROW(c.check_world_size(4));
  EXPECT_THROW(c.check_world_size(3), ConfigError);
}

// DeepSpeed's offload section reads (a DeepSpeed config is taken as written), but the engine
// offloads nothing: validation, which initialize runs once its state is built, refuses it.
TEST(Config, ReadsAnOffloadDeviceAndRefusesAllButNoneAtValidation) {
  Config c = Config::parse(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}})");
  EXPECT_EQ(c.zero_optimization.offload_optimizer_device, "cpu");
  EXPECT_EQ(Config::from_json(c.to_json()).zero_optimization.offload_optimizer_device, "cpu");
  try {
    c.validate(2);
    ADD_FAILURE() << "an offload to the cpu passed validation";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("$.zero_optimization.offload_optimizer.device: \"cpu\": ", 0), 0u)
        << e.what();
  }
  Config none = Config::parse(R"({"zero_optimization": {"offload_optimizer": {"device": "none"}}})");
  EXPECT_NO_THROW(none.validate(2));
  EXPECT_FALSE(none.to_json()["zero_optimization"].contains("offload_optimizer"));
  EXPECT_EQ(error_of(R"({"zero_optimization": {"offload_optimizer": {"device": "gpu"}}})"),
            "$.zero_optimization.offload_optimizer.device: unknown value \"gpu\" (expected one of: none, cpu, nvme)");
  EXPECT_EQ(error_of(R"({"zero_optimization": {"offload_optimizer": {"pin_memory": true}}})"),
            "$.zero_optimization.offload_optimizer.pin_memory: unknown key (expected one of: device)");
}

// DeepSpeed's precision keys read as DeepSpeed names them; an absent key stays absent (the
// replayed version's default, which differs per version), a written one round-trips; fp16 alone
// is valid on every lane (initialize refuses it where LibTorch has no CPU fp16), fp16 and bf16
// together are refused by the key, as DeepSpeed asserts.
TEST(Config, PrecisionKeysKeepWhatIsWrittenAndFp16WithBf16IsRefusedByTheKey) {
  Config plain = Config::parse(R"({})");
  EXPECT_FALSE(plain.precision.gradient_clipping.has_value());
  EXPECT_FALSE(plain.to_json().contains("gradient_clipping"));
  EXPECT_FALSE(plain.to_json().contains("bf16"));
  Config c = Config::parse(R"({"bf16": {"enabled": true, "check_grad_overflow": false},
      "fp16": {"loss_scale": 0, "initial_scale_power": 4, "loss_scale_window": 2, "hysteresis": 1,
               "min_loss_scale": 1, "consecutive_hysteresis": true},
      "data_types": {"grad_accum_dtype": "fp32"}, "communication_data_type": "bf16",
      "gradient_clipping": 0.5})");
  EXPECT_EQ(c.precision.bf16_enabled, true);
  EXPECT_EQ(c.precision.fp16_initial_scale_power, 4);
  EXPECT_EQ(c.precision.grad_accum_dtype, "fp32");
  EXPECT_EQ(c.precision.gradient_clipping, 0.5);
  EXPECT_EQ(Config::from_json(c.to_json()).to_json(), c.to_json());
  EXPECT_EQ(c.to_json()["bf16"]["check_grad_overflow"], false);
  EXPECT_NO_THROW(c.validate(2));
  EXPECT_NO_THROW(Config::parse(R"({"fp16": {"enabled": true}})").validate(1));
  try {
    Config::parse(R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})").validate(1);
    ADD_FAILURE() << "fp16 with bf16 passed validation";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("$.fp16.enabled: true together with bf16.enabled", 0), 0u) << e.what();
  }
  EXPECT_NO_THROW(Config::parse(R"({"bf16": {"enabled": false}, "gradient_clipping": 1.0})").validate(1));
  EXPECT_EQ(error_of(R"({"gradient_clipping": -1})"), "$.gradient_clipping: value -1.0 is out of range [0.0, 1.7976931348623157e+308]");
  EXPECT_EQ(error_of(R"({"communication_data_type": "fp8"})"),
            "$.communication_data_type: unknown value \"fp8\" (expected one of: fp32, fp16, bf16)");
  EXPECT_EQ(error_of(R"({"fp16": {"hysteresis": 0}})"), "$.fp16.hysteresis: value 0 is out of range [1, 2147483647]");
  EXPECT_EQ(error_of(R"({"bf16": {"enable": true}})").rfind("$.bf16.enable: unknown key", 0), 0u);
}

TEST(Config, DescribesEveryKey) {
  const std::string text = Config::describe_keys();
  for (const char* key : {"train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                          "zero_optimization.stage3_param_persistence_threshold",
                          "zero_optimization.offload_optimizer.device", "bf16.enabled",
                          "fp16.loss_scale_window", "data_types.grad_accum_dtype", "gradient_clipping"})
    EXPECT_NE(text.find(key), std::string::npos) << key;
}

}  // namespace
}  // namespace zero3
