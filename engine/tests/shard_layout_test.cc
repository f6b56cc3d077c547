#include <gtest/gtest.h>

#include "engine/errors.h"
#include "engine/param_status.h"
#include "engine/shard_layout.h"

#include <ATen/ATen.h>

#include <cmath>

namespace zero3 {
namespace {

TEST(ShardLayout, ChunksArePaddedCeilings) {
  struct Case { int64_t numel, world, chunk, padded; };
  for (const Case& c : {Case{105, 4, 27, 108}, Case{13, 5, 3, 15}, Case{1, 3, 1, 3},
                        Case{0, 4, 0, 0}, Case{16, 4, 4, 16}, Case{7, 1, 7, 7}}) {
    const auto layout = ShardLayout::of(c.numel, c.world);
    EXPECT_EQ(layout.chunk(), c.chunk) << c.numel << "/" << c.world;
    EXPECT_EQ(layout.padded_numel(), c.padded);
    int64_t real = 0;
    for (int64_t r = 0; r < c.world; ++r) real += layout.real_in_shard(r);
    EXPECT_EQ(real, c.numel);
  }
}

TEST(ShardLayout, ShardsConcatenateToThePaddedTensorWithZeroPadding) {
  const at::Tensor full = at::arange(1, 14, at::kFloat).view({13});  // prime numel
  const auto layout = ShardLayout::of(13, 4);
  std::vector<at::Tensor> shards;
  for (int64_t r = 0; r < 4; ++r) shards.push_back(layout.shard_of(full, r));
  const at::Tensor joined = at::cat(shards);
  EXPECT_TRUE(at::equal(joined.narrow(0, 0, 13), full));
  EXPECT_TRUE(at::equal(joined.narrow(0, 13, 3), at::zeros({3})));
  EXPECT_EQ(layout.real_in_shard(3), 1);
}

// The padding is written, not inherited: each copy goes where a tensor of NaNs of its size
// just was (the allocator hands a freed block of that size back; kilobytes, so no bookkeeping
// object takes it first), so a copy that skipped the zeros shows.
TEST(ShardLayout, PaddingIsZeroEvenInReusedMemory) {
  const auto layout = ShardLayout::of(3001, 4);  // chunk 751: rank 3 holds 748 real, 3 padding
  const at::Tensor full = at::arange(1, 3002, at::kFloat);
  for (int round = 0; round < 4; ++round) {
    { at::Tensor junk = at::full({layout.chunk()}, NAN); }
    const at::Tensor last = layout.shard_of(full, 3);
    EXPECT_TRUE(at::equal(last.narrow(0, 0, 748), full.narrow(0, 2253, 748)));
    EXPECT_TRUE(at::equal(last.narrow(0, 748, 3), at::zeros({3}))) << last.narrow(0, 748, 3);
    { at::Tensor junk = at::full({layout.padded_numel()}, NAN); }
    const at::Tensor padded = layout.pad(full);
    EXPECT_TRUE(at::equal(padded.narrow(0, 0, 3001), full));
    EXPECT_TRUE(at::equal(padded.narrow(0, 3001, 3), at::zeros({3}))) << padded.narrow(0, 3001, 3);
  }
}

TEST(ParamStatus, OnlyTheScheduleOrderIsLegal) {
  ParamStatus s = ParamStatus::NotAvailable;
  transition(s, ParamStatus::Inflight, "w");
  transition(s, ParamStatus::Available, "w");
  transition(s, ParamStatus::NotAvailable, "w");
  EXPECT_EQ(s, ParamStatus::NotAvailable);
  EXPECT_THROW(transition(s, ParamStatus::Available, "layers.0.weight"), IllegalTransition);
  EXPECT_THROW(transition(s, ParamStatus::NotAvailable, "w"), IllegalTransition);
  s = ParamStatus::Inflight;
  EXPECT_THROW(transition(s, ParamStatus::NotAvailable, "w"), IllegalTransition);
  try {
    ParamStatus a = ParamStatus::Available;
    transition(a, ParamStatus::Inflight, "layers.0.weight");
    FAIL() << "AVAILABLE -> INFLIGHT was accepted";
  } catch (const IllegalTransition& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.weight"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("AVAILABLE -> INFLIGHT"), std::string::npos);
  }
}

}  // namespace
}  // namespace zero3
