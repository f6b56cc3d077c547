#include "engine/zip_archive_check.h"

#include "engine/crc32c.h"
#include "engine/errors.h"

#include <caffe2/serialize/versions.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <set>

namespace zero3 {
namespace {

// The record signatures and fixed sizes of the zip format (PKWARE APPNOTE 4.3).
constexpr uint32_t kLocalHeader = 0x04034b50, kCentralHeader = 0x02014b50;
constexpr uint32_t kEnd = 0x06054b50, kEnd64Locator = 0x07064b50, kEnd64 = 0x06064b50;
constexpr uint64_t kLocalSize = 30, kCentralSize = 46, kEndSize = 22, kLocatorSize = 20, kEnd64Size = 56;
// General-purpose flags LibTorch's writer sets: sizes in a data descriptor (3), UTF-8 names (11).
constexpr uint16_t kAllowedFlags = (1u << 3) | (1u << 11);

struct Entry {
  std::string name;
  uint32_t crc = 0;
  uint64_t size = 0, local_offset = 0;
};

class Reader {
 public:
  Reader(const std::vector<char>& bytes, const std::string& file) : bytes_(bytes), file_(file) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw CheckpointError(file_ + ": not a zip archive LibTorch can open safely: " + what);
  }
  bool fits(uint64_t offset, uint64_t size) const { return offset <= bytes_.size() && size <= bytes_.size() - offset; }
  uint64_t le(uint64_t offset, int width) const {
    if (!fits(offset, static_cast<uint64_t>(width))) fail("a record at byte " + std::to_string(offset) + " is cut off");
    uint64_t value = 0;
    for (int i = width - 1; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes_[offset + i]);
    return value;
  }
  uint64_t size() const { return bytes_.size(); }
  const char* at(uint64_t offset) const { return bytes_.data() + offset; }

 private:
  const std::vector<char>& bytes_;
  const std::string& file_;
};

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

struct Directory {
  uint64_t entries = 0, size = 0, offset = 0, end = 0;  // end: where the end records begin
};

// Finds the end of central directory as miniz does (the last signature from the end of the file
// whose record fits), and its zip64 form when a locator precedes it.
Directory find_directory(const Reader& r) {
  if (r.size() < kEndSize) r.fail("shorter than an end-of-directory record");
  const uint64_t lowest = r.size() > kEndSize + 0xFFFF ? r.size() - kEndSize - 0xFFFF : 0;
  uint64_t end = r.size() - kEndSize + 1;
  do {
    --end;
    if (r.le(end, 4) == kEnd) break;
    if (end == lowest) r.fail("no end-of-central-directory record");
  } while (true);
  if (r.le(end + 4, 2) != 0 || r.le(end + 6, 2) != 0) r.fail("spans several disks");
  Directory d{r.le(end + 10, 2), r.le(end + 12, 4), r.le(end + 16, 4), end};
  if (r.le(end + 8, 2) != d.entries) r.fail("entry counts of the end record disagree");
  if (end >= kLocatorSize + kEnd64Size && r.le(end - kLocatorSize, 4) == kEnd64Locator) {
    const uint64_t end64 = r.le(end - kLocatorSize + 8, 8);
    if (!r.fits(end64, kEnd64Size) || r.le(end64, 4) != kEnd64) r.fail("its zip64 locator points at no zip64 end record");
    if (r.le(end64 + 16, 4) != 0 || r.le(end64 + 20, 4) != 0 || r.le(end64 + 24, 8) != r.le(end64 + 32, 8))
      r.fail("its zip64 end record spans several disks");
    const Directory d64{r.le(end64 + 32, 8), r.le(end64 + 40, 8), r.le(end64 + 48, 8), end64};
    // miniz takes the zip64 figures; both forms must say the same (or the 32-bit one "see zip64").
    auto agrees = [](uint64_t narrow, uint64_t wide, uint64_t sentinel) { return narrow == wide || narrow == sentinel; };
    if (!agrees(d.entries, d64.entries, 0xFFFF) || !agrees(d.size, d64.size, 0xFFFFFFFF) ||
        !agrees(d.offset, d64.offset, 0xFFFFFFFF))
      r.fail("its zip64 and 32-bit end records disagree");
    d = d64;
  }
  if (d.offset > d.end || d.size != d.end - d.offset)
    r.fail("the central directory (" + std::to_string(d.size) + " bytes at " + std::to_string(d.offset) +
           ") does not end where the end records begin");
  if (d.entries == 0) r.fail("it holds no entries");
  return d;
}

std::vector<Entry> read_entries(const Reader& r, const Directory& d) {
  std::vector<Entry> entries;
  std::set<std::string> seen;
  uint64_t at = d.offset;
  for (uint64_t i = 0; i < d.entries; ++i) {
    const std::string which = "entry " + std::to_string(i);
    if (at + kCentralSize > d.end || r.le(at, 4) != kCentralHeader) r.fail(which + " of the central directory is missing");
    const uint64_t flags = r.le(at + 8, 2), method = r.le(at + 10, 2);
    const uint64_t compressed = r.le(at + 20, 4), size = r.le(at + 24, 4);
    const uint64_t name_length = r.le(at + 28, 2), extra = r.le(at + 30, 2), comment = r.le(at + 32, 2);
    Entry e{std::string(), static_cast<uint32_t>(r.le(at + 16, 4)), size, r.le(at + 42, 4)};
    if (at + kCentralSize + name_length + extra + comment > d.end) r.fail(which + " runs past the central directory");
    e.name.assign(r.at(at + kCentralSize), name_length);
    const std::string named = which + " ('" + e.name + "')";
    if (e.name.empty() || std::any_of(e.name.begin(), e.name.end(), [](unsigned char c) { return c < 0x20; }))
      r.fail(which + " has an empty name or control bytes in it");
    if ((flags & ~kAllowedFlags) != 0) r.fail(named + " has flags " + std::to_string(flags) + " (encrypted or patched)");
    if (method != 0 || compressed != size) r.fail(named + " is compressed (method " + std::to_string(method) + ")");
    if (size == 0xFFFFFFFF || e.local_offset == 0xFFFFFFFF) r.fail(named + " needs zip64 sizes");
    if (r.le(at + 34, 2) != 0) r.fail(named + " starts on another disk");
    if (!seen.insert(lower(e.name)).second) r.fail(named + " is there twice (names are matched ignoring case)");
    entries.push_back(std::move(e));
    at += kCentralSize + name_length + extra + comment;
  }
  if (at != d.end) r.fail("the central directory has bytes after its last entry");
  return entries;
}

// What miniz checks when LibTorch reads the entry: its local header, then its bytes and CRC.
void check_data(const Reader& r, const Entry& e, uint64_t directory_offset) {
  const std::string named = "entry '" + e.name + "'";
  if (!r.fits(e.local_offset, kLocalSize) || r.le(e.local_offset, 4) != kLocalHeader)
    r.fail(named + " has no local header at byte " + std::to_string(e.local_offset));
  const uint64_t name_length = r.le(e.local_offset + 26, 2), extra = r.le(e.local_offset + 28, 2);
  const uint64_t data = e.local_offset + kLocalSize + name_length + extra;
  if (name_length != e.name.size() || !r.fits(e.local_offset + kLocalSize, name_length) ||
      std::string(r.at(e.local_offset + kLocalSize), name_length) != e.name)
    r.fail(named + ": its local header names another entry");
  if (data > directory_offset || e.size > directory_offset - data)
    r.fail(named + ": its " + std::to_string(e.size) + " bytes run into the central directory");
  if (crc32_zip(r.at(data), e.size) != e.crc) r.fail(named + ": its bytes do not match its CRC-32");
}

// LibTorch reads "<folder>/.data/version", else "<folder>/version", and parses it as a number.
void check_version(const Reader& r, const std::vector<Entry>& entries) {
  const std::string& first = entries.front().name;
  const auto slash = first.find('/');
  if (slash == std::string::npos) r.fail("its first entry ('" + first + "') is not in a folder");
  const std::string folder = lower(first.substr(0, slash + 1));
  const Entry* version = nullptr;
  for (const char* name : {".data/version", "version"}) {
    for (const Entry& e : entries)
      if (lower(e.name) == folder + name) version = &e;
    if (version != nullptr) break;
  }
  if (version == nullptr) r.fail("no version record in folder '" + first.substr(0, slash) + "'");
  const uint64_t data = version->local_offset + kLocalSize + r.le(version->local_offset + 26, 2) +
                        r.le(version->local_offset + 28, 2);
  std::string text(r.at(data), version->size);
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (text.empty() || text.size() > 18 || !std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); }))
    r.fail("its version record is not a number");
  const uint64_t value = std::stoull(text);
  if (value < caffe2::serialize::kMinSupportedFileFormatVersion || value > caffe2::serialize::kMaxSupportedFileFormatVersion)
    r.fail("file format version " + text + " is not one this LibTorch reads");
}

}  // namespace

void check_zip_archive(const std::vector<char>& bytes, const std::string& file) {
  const Reader r(bytes, file);
  if (r.size() >= 8 && std::string(r.at(0), 8) == "PYTORCH1") r.fail("a preview-release archive");
  const Directory d = find_directory(r);
  const std::vector<Entry> entries = read_entries(r, d);
  for (const Entry& e : entries) check_data(r, e, d.offset);
  check_version(r, entries);
}

}  // namespace zero3
