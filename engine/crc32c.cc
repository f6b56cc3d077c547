#include "engine/crc32c.h"

#include "engine/errors.h"

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

namespace zero3 {
namespace {

using Table = std::array<uint32_t, 256>;

Table make_table(uint32_t reflected_polynomial) {
  Table table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ reflected_polynomial : c >> 1;
    table[i] = c;
  }
  return table;
}

uint32_t reflected_crc(const Table& table, const void* data, size_t size, uint32_t crc) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  static const Table table = make_table(0x82F63B78u);
  return reflected_crc(table, data, size, crc);
}

uint32_t crc32_zip(const void* data, size_t size, uint32_t crc) {
  static const Table table = make_table(0xEDB88320u);
  return reflected_crc(table, data, size, crc);
}

uint32_t crc32c_of_file(const std::string& path, uint64_t* size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError(path + ": cannot open it: " + std::strerror(errno));
  std::vector<char> buffer(1 << 16);
  uint32_t crc = 0;
  uint64_t total = 0;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto got = static_cast<size_t>(in.gcount());
    crc = crc32c(buffer.data(), got, crc);
    total += got;
  }
  if (in.bad()) throw CheckpointError(path + ": read error");
  if (size) *size = total;
  return crc;
}

}  // namespace zero3
