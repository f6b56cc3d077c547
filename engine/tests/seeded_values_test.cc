// The seeded values against the golden fixture the Python replay is held to as well
// (harness/deepspeed/tests/test_seeded.py): one rule, the same float32 bits in both languages.
#include "engine/seeded_values.h"

#include "engine/errors.h"
#include "engine/layers.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <string>

namespace {

nlohmann::json fixture() {
  std::ifstream in(std::string(ZEROCHECK_SOURCE_DIR) + "/harness/tests/fixtures/seeded_values.json");
  EXPECT_TRUE(in.good()) << "missing harness/tests/fixtures/seeded_values.json";
  return nlohmann::json::parse(in);
}

uint64_t hex(const nlohmann::json& text) { return std::stoull(text.get<std::string>(), nullptr, 16); }

uint32_t bits_of(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

zero3::ValueStream stream_named(const std::string& name) {
#define ZERO3_STREAM_BY_NAME(stream_name, tag, key) \
  if (name == #stream_name) return zero3::ValueStream::stream_name;
  ZERO3_VALUE_STREAMS(ZERO3_STREAM_BY_NAME)
#undef ZERO3_STREAM_BY_NAME
  throw std::invalid_argument("unknown stream " + name);
}

uint64_t key_of(const nlohmann::json& c) {
  if (c.contains("path")) return zero3::fnv1a64(c["path"].get<std::string>());
  return zero3::data_key(c["op_index"].get<int64_t>(), c["rank"].get<int>());
}

float bound_of(const nlohmann::json& c) {
  return c.contains("fan_in") ? zero3::parameter_bound(c["fan_in"].get<int64_t>()) : c["bound"].get<float>();
}

TEST(SeededValues, PrimitivesGiveThePublishedReferenceOutputs) {
  const auto f = fixture();
  for (const auto& c : f["splitmix64"]) EXPECT_EQ(zero3::splitmix64(hex(c["state"])), hex(c["output"])) << c;
  for (const auto& c : f["fnv1a64"]) EXPECT_EQ(zero3::fnv1a64(c["text"].get<std::string>()), hex(c["hash"])) << c;
}

TEST(SeededValues, StreamTagsAreTheFixtures) {
  const auto f = fixture();
  size_t rows = 0;
#define ZERO3_STREAM_TAG_MATCHES(name, tag, key)                      \
  ++rows;                                                             \
  EXPECT_EQ(f["streams"].at(#name).get<uint64_t>(), uint64_t{tag}) << #name;
  ZERO3_VALUE_STREAMS(ZERO3_STREAM_TAG_MATCHES)
#undef ZERO3_STREAM_TAG_MATCHES
  EXPECT_EQ(rows, f["streams"].size());
}

// The fixture is held in a local: a range-for over fixture()["..."] iterates a member of a
// temporary destroyed before the loop runs (ASan: heap-use-after-free).
TEST(SeededValues, ParameterBounds) {
  const auto f = fixture();
  for (const auto& c : f["parameter_bounds"])
    EXPECT_EQ(bits_of(zero3::parameter_bound(c["fan_in"].get<int64_t>())), hex(c["bits"])) << c;
}

TEST(SeededValues, StreamsGiveTheGoldenBits) {
  const auto f = fixture();
  for (const auto& c : f["values"]) {
    const uint64_t base = zero3::stream_base(c["seed"].get<uint64_t>(), stream_named(c["stream"]), key_of(c));
    EXPECT_EQ(base, hex(c["base"])) << c;
    int64_t n = 0;
    for (const auto& i : c["indices"]) n = std::max<int64_t>(n, i.get<int64_t>() + 1);
    at::Tensor filled = at::empty({n});
    zero3::fill_seeded(filled, base, bound_of(c));
    for (size_t j = 0; j < c["indices"].size(); ++j) {
      const int64_t i = c["indices"][j].get<int64_t>();
      EXPECT_EQ(bits_of(filled.data_ptr<float>()[i]), hex(c["bits"][j])) << c << " index " << i;
    }
  }
}

TEST(SeededValues, FillRefusesWhatItCannotFillExactly) {
  EXPECT_THROW(zero3::fill_seeded(at::empty({3}, at::kDouble), 1, 1.0F), zero3::UsageError);
  EXPECT_THROW(zero3::fill_seeded(at::empty({3, 4}).t(), 1, 1.0F), zero3::UsageError);
}

// init_parameters keys each parameter by its path: a tied module's parameters by its first place.
TEST(SeededValues, InitParametersUsesEachParametersPathsStream) {
  auto root = std::make_shared<zero3::Sequential>();
  auto tied = std::make_shared<zero3::Linear>(3, 3);
  root->push_back(tied);
  root->push_back(std::make_shared<zero3::Linear>(3, 3, /*bias=*/false));
  root->push_back(tied);
  zero3::init_parameters(*root, 11);
  at::Tensor expected = at::empty({3, 3});
  zero3::fill_seeded(expected, zero3::stream_base(11, zero3::ValueStream::parameter, zero3::fnv1a64("0.weight")),
                     zero3::parameter_bound(3));
  EXPECT_TRUE(at::equal(tied->weight, expected));
  at::Tensor other = at::empty({3, 3});
  zero3::fill_seeded(other, zero3::stream_base(11, zero3::ValueStream::parameter, zero3::fnv1a64("1.weight")),
                     zero3::parameter_bound(3));
  EXPECT_TRUE(at::equal(std::dynamic_pointer_cast<zero3::Linear>(root->at(1))->weight, other));
}

}  // namespace
