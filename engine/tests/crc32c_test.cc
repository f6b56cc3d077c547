// The checkpoint checksum: the CPU's instruction and the table must give the same CRC-32C for
// every length, alignment and split, since a file saved on one machine is verified on another.
#include "engine/crc32c.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace zero3 {
namespace {

TEST(Crc32c, IsTheCastagnoliChecksumEitherWay) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c_by_table("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  EXPECT_EQ(crc32c_by_table("", 0), 0u);
}

TEST(Crc32c, TheInstructionAndTheTableAgreeOnEveryLengthOffsetAndSplit) {
  std::mt19937 random(7);
  std::vector<unsigned char> bytes(300);
  for (auto& b : bytes) b = static_cast<unsigned char>(random());
  for (size_t offset = 0; offset < 8; ++offset)
    for (size_t length = 0; offset + length <= 96; ++length) {
      const unsigned char* data = bytes.data() + offset;
      const uint32_t expected = crc32c_by_table(data, length);
      ASSERT_EQ(crc32c(data, length), expected) << "offset " << offset << ", length " << length;
      const size_t split = length / 3;  // continuing from a first part's checksum
      ASSERT_EQ(crc32c(data + split, length - split, crc32c(data, split)), expected)
          << "offset " << offset << ", length " << length << ", split at " << split;
    }
  EXPECT_EQ(crc32c(bytes.data(), bytes.size()), crc32c_by_table(bytes.data(), bytes.size()));
}

}  // namespace
}  // namespace zero3
