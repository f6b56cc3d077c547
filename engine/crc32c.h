// CRC-32C (Castagnoli), the checksum of checkpoint files.
//
// Chosen because it detects every burst error up to 32 bits and every odd number of flipped
// bits, needs no library beyond this file, and is what iSCSI, ext4 and leveldb use for the same
// job. Bit-reflected, polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF:
// crc32c("123456789") == 0xE3069283.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace zero3 {

// Returns the CRC-32C of `size` bytes at `data`, continuing from `crc` (0 to start).
// Uses the CPU's CRC-32C instruction where there is one (x86-64 with SSE 4.2).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
// The same checksum from a table, a byte at a time: what crc32c does without the instruction,
// public so that tests can hold the two to each other.
uint32_t crc32c_by_table(const void* data, size_t size, uint32_t crc = 0);
// Returns the CRC-32C of the file at `path` and its size in bytes through `size`.
// Throws CheckpointError naming the file when it cannot be read.
uint32_t crc32c_of_file(const std::string& path, uint64_t* size);

// Returns the CRC-32 of zip archives (IEEE 802.3, bit-reflected polynomial 0xEDB88320, same
// initial value and final xor; crc32_zip("123456789") == 0xCBF43926), which the rank files'
// zip entries carry and LibTorch's reader checks.
uint32_t crc32_zip(const void* data, size_t size, uint32_t crc = 0);

}  // namespace zero3
