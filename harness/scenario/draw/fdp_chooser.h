// FdpChooser: a Chooser that reads libFuzzer bytes through FuzzedDataProvider.
//
// Each choice reads the fewest whole bytes that cover its range, from the end of the input, and
// re-reads when the value falls in the top partial block, so every choice is equally likely for
// uniform bytes (plain modulo favours the low choices by up to a range's worth in 256, visibly in
// the distribution test). An exhausted input reads zeros: every choice is then its smallest, and
// another() says no, so any prefix of an input decodes to a valid, shorter scenario.
//
// Thread-safety: one per draw; the bytes must outlive it.
#pragma once

#include "harness/scenario/draw/chooser.h"

#include <cstddef>
#include <cstdint>
#include <memory>

class FuzzedDataProvider;

namespace zerocheck {

class FdpChooser final : public Chooser {
 public:
  FdpChooser(const uint8_t* data, size_t size);
  ~FdpChooser() override;

  int64_t integer(int64_t lo, int64_t hi) override;
  // Returns whether input bytes remain.
  bool another() override;
  // Returns how many bytes are left: the next choice reads data[remaining() - 1] and down.
  size_t remaining() const;
  // Returns how many reads found fewer bytes left than they needed (and took zeros for the rest).
  size_t short_reads() const { return short_reads_; }

 private:
  std::unique_ptr<FuzzedDataProvider> in_;
  size_t short_reads_ = 0;
};

}  // namespace zerocheck
