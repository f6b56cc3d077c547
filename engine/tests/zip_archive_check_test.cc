// The zip container check that keeps LibTorch's reader from leaking on archives its constructor
// refuses (engine/zip_archive_check.h): real rank files pass, each refusal names what is wrong.
#include "engine/crc32c.h"
#include "engine/errors.h"
#include "engine/zip_archive_check.h"

#include <caffe2/serialize/versions.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

namespace zero3 {
namespace {

void put(std::string& out, uint64_t value, int width) {
  for (int i = 0; i < width; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

struct ZipEntry {
  std::string name, data;
  uint16_t method = 0;
  uint32_t crc_xor = 0;  // damage to the recorded CRC
};

// A plain (not zip64) archive of stored entries, laid out as the zip format requires.
std::vector<char> zip_of(const std::vector<ZipEntry>& entries) {
  std::string out, directory;
  for (const auto& e : entries) {
    const uint32_t crc = crc32_zip(e.data.data(), e.data.size()) ^ e.crc_xor;
    const auto offset = out.size();
    put(out, 0x04034b50, 4), put(out, 20, 2), put(out, 0, 2), put(out, e.method, 2), put(out, 0, 4);
    put(out, crc, 4), put(out, e.data.size(), 4), put(out, e.data.size(), 4), put(out, e.name.size(), 2), put(out, 0, 2);
    out += e.name + e.data;
    put(directory, 0x02014b50, 4), put(directory, 20, 2), put(directory, 20, 2), put(directory, 0, 2);
    put(directory, e.method, 2), put(directory, 0, 4), put(directory, crc, 4), put(directory, e.data.size(), 4);
    put(directory, e.data.size(), 4), put(directory, e.name.size(), 2), put(directory, 0, 6), put(directory, 0, 2);
    put(directory, 0, 4), put(directory, offset, 4);
    directory += e.name;
  }
  const auto directory_offset = out.size();
  out += directory;
  put(out, 0x06054b50, 4), put(out, 0, 4), put(out, entries.size(), 2), put(out, entries.size(), 2);
  put(out, directory.size(), 4), put(out, directory_offset, 4), put(out, 0, 2);
  return {out.begin(), out.end()};
}

std::string refusal(const std::vector<char>& bytes) {
  try {
    check_zip_archive(bytes, "rank.pt");
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

TEST(ZipArchiveCheck, TheZipChecksumIsTheStandardOne) {
  EXPECT_EQ(crc32_zip("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // unchanged by the shared table code
}

TEST(ZipArchiveCheck, WhatLibTorchWritesPasses) {
  // pickle_save writes zip64 end records, data descriptors and alignment padding: all accepted.
  const std::vector<char> saved =
      torch::pickle_save(c10::ivalue::Tuple::create({c10::IValue(torch::arange(300, torch::kFloat)), c10::IValue(7)}));
  EXPECT_EQ(refusal(saved), "");
  EXPECT_EQ(refusal(zip_of({{"archive/data.pkl", "x"}, {"archive/version", "3\n"}})), "");
  const std::string newest = std::to_string(caffe2::serialize::kMaxSupportedFileFormatVersion);
  EXPECT_EQ(refusal(zip_of({{"a/version", newest}})), "");  // the newest version this LibTorch reads
}

TEST(ZipArchiveCheck, EveryArchiveLibTorchsConstructorWouldRefuseIsRefusedFirst) {
  const std::vector<char> saved = torch::pickle_save(c10::IValue(torch::ones({4})));
  const std::vector<std::pair<std::vector<char>, std::string>> cases = {
      {{}, "shorter than an end-of-directory record"},
      {std::vector<char>(saved.begin(), saved.end() - 1), "no end-of-central-directory record"},
      {zip_of({}), "no entries"},
      {zip_of({{"version", "3"}}), "its first entry ('version') is not in a folder"},
      {zip_of({{"archive/data.pkl", "x"}}), "no version record in folder 'archive'"},
      {zip_of({{"archive/version", ""}}), "version record is not a number"},
      {zip_of({{"archive/version", "three"}}), "version record is not a number"},
      {zip_of({{"archive/version", "99"}}), "file format version 99"},
      {zip_of({{"archive/version", "0"}}), "file format version 0"},
      {zip_of({{"archive/version", "3", 0, 1}}), "'archive/version': its bytes do not match its CRC-32"},
      {zip_of({{"archive/version", "3"}, {"archive/data.pkl", "x", 8}}), "is compressed (method 8)"},
      {zip_of({{"archive/version", "3"}, {"Archive/Version", "4"}}), "is there twice"},
      {zip_of({{std::string("archive/ver\0ion", 15), "3"}}), "control bytes"},
  };
  for (const auto& [bytes, expected] : cases) {
    const std::string message = refusal(bytes);
    EXPECT_NE(message.find("rank.pt: "), std::string::npos) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << "expected '" << expected << "' in: " << message;
  }
}

TEST(ZipArchiveCheck, EveryCutOfARealFileIsRefusedWithoutThrowingAnythingElse) {
  const std::vector<char> saved = torch::pickle_save(c10::IValue(torch::ones({64})));
  for (size_t size = 0; size < saved.size(); ++size) {
    const std::vector<char> cut(saved.begin(), saved.begin() + static_cast<std::ptrdiff_t>(size));
    EXPECT_THROW(check_zip_archive(cut, "rank.pt"), CheckpointError) << "cut at " << size;
  }
}

}  // namespace
}  // namespace zero3
