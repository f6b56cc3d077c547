// The structure check of a rank file's zip container, before LibTorch's reader sees it.
//
// Why: LibTorch's PyTorchStreamReader (1.13 and 2.x) opens the zip with miniz and then, still in
// its constructor, looks up the archive's folder and reads its version record. When one of those
// steps throws (no entries, a first name without '/', no version record, a record whose CRC
// fails, a version it cannot parse or support), its destructor never runs and miniz's reader
// state leaks (about 2.4 KB per refused file; found by fuzz_checkpoint under LeakSanitizer). The
// manifest's CRC-32C rejects every damaged file first, but a checkpoint whose manifest was
// written for bad files reached that path. This check accepts only archives on which every one
// of those steps succeeds, and is stricter than miniz where that is simpler: every entry stored
// (method 0, as LibTorch writes them), sizes and offsets inside the file, each entry's bytes
// matching its CRC-32, no two names equal ignoring case (miniz looks names up that way).
#pragma once

#include <string>
#include <vector>

namespace zero3 {

// Throws CheckpointError naming `file` and what is wrong when `bytes` is not such an archive.
void check_zip_archive(const std::vector<char>& bytes, const std::string& file);

}  // namespace zero3
