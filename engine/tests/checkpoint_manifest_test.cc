// The manifest's precision section (checkpoint_manifest.h): written and read back field for
// field, absent in a manifest written before it existed, and every value out of range refused
// with a CheckpointError naming its JSON path.
#include <gtest/gtest.h>

#include "engine/checkpoint_manifest.h"
#include "engine/errors.h"

#include <string>

namespace zero3 {
namespace {

CheckpointManifest one_parameter(int64_t micro_steps) {
  CheckpointManifest m;
  m.micro_steps = micro_steps;
  m.optimizer = "adam";
  m.params.push_back({"w", {4}, "float32", true, "partitioned", -1, {{0, 0, 4}}});
  m.files.push_back({rank_file_name(0, 1), 10, 7});
  return m;
}

std::string with_precision(const std::string& field, const std::string& value) {
  CheckpointManifest m = one_parameter(6);
  m.has_precision = true;
  m.precision = {8.0, 5, 3, 1, 2};
  nlohmann::json doc = nlohmann::json::parse(m.to_json());
  doc["precision"][field] = nlohmann::json::parse(value);
  return doc.dump();
}

TEST(ManifestPrecision, RoundTripsEveryField) {
  CheckpointManifest m = one_parameter(6);
  m.has_precision = true;
  m.precision = {0.5, 5, 3, 1, 2};
  const CheckpointManifest back = CheckpointManifest::parse(m.to_json(), "manifest.json");
  ASSERT_TRUE(back.has_precision);
  EXPECT_EQ(back.precision.loss_scale, 0.5);
  EXPECT_EQ(back.precision.scaler_iter, 5);
  EXPECT_EQ(back.precision.last_overflow_iter, 3);
  EXPECT_EQ(back.precision.hysteresis_left, 1);
  EXPECT_EQ(back.precision.skipped_steps, 2);
}

TEST(ManifestPrecision, AManifestWithoutItReadsAsAbsent) {
  const std::string text = one_parameter(6).to_json();
  EXPECT_EQ(text.find("precision"), std::string::npos);
  EXPECT_FALSE(CheckpointManifest::parse(text, "manifest.json").has_precision);
}

TEST(ManifestPrecision, ValuesOutOfRangeAreRefusedByTheirPath) {
  const struct {
    const char* field;
    const char* value;
  } bad[] = {{"loss_scale", "0"},          {"loss_scale", "-2"},      {"loss_scale", "\"8\""},
             {"scaler_iter", "-1"},        {"last_overflow_iter", "6"},  // after the scaler's 5 updates
             {"last_overflow_iter", "-2"}, {"hysteresis_left", "-1"}, {"skipped_steps", "7"}};  // of 6 micro-steps
  for (const auto& b : bad) {
    SCOPED_TRACE(std::string(b.field) + " = " + b.value);
    try {
      CheckpointManifest::parse(with_precision(b.field, b.value), "manifest.json");
      ADD_FAILURE() << "accepted";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("$.precision.") + b.field), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("manifest.json: ", 0), 0u) << e.what();
    }
  }
}

}  // namespace
}  // namespace zero3
