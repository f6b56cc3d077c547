#include "engine/checkpoint_reader.h"

#include "engine/crc32c.h"
#include "engine/errors.h"
#include "engine/zip_archive_check.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace zero3 {
namespace {

namespace fs = std::filesystem;

// The whole file, read once: its checksum and its parse both use these bytes.
std::vector<char> read_bytes(const std::string& file) {
  std::ifstream in(file, std::ios::binary | std::ios::ate);
  if (!in) throw CheckpointError(file + ": missing or unreadable");
  const std::streamoff size = in.tellg();
  if (size < 0) throw CheckpointError(file + ": cannot tell its size");
  std::vector<char> bytes(static_cast<size_t>(size));
  in.seekg(0);
  if (!in.read(bytes.data(), size) || in.peek() != std::char_traits<char>::eof())
    throw CheckpointError(file + ": read error (changed while being read?)");
  return bytes;
}

std::string hex(uint32_t value) {
  char buffer[11];
  std::snprintf(buffer, sizeof buffer, "0x%08x", value);
  return buffer;
}

// Requires `value` to be a tuple of `size` fields; `what` names it in the message.
std::vector<c10::IValue> tuple_of(const c10::IValue& value, size_t size, const std::string& what) {
  if (!value.isTuple()) throw CheckpointError(what + " is not a tuple");
  auto fields = value.toTuple()->elements().vec();
  if (fields.size() != size)
    throw CheckpointError(what + " has " + std::to_string(fields.size()) + " fields, expected " + std::to_string(size));
  return fields;
}

// Requires a 1-D float32 tensor of `n` elements.
void check_elements(const c10::IValue& value, int64_t n, const std::string& what) {
  if (!value.isTensor()) throw CheckpointError(what + " is not a tensor");
  const at::Tensor& t = value.toTensor();
  if (t.scalar_type() != at::kFloat || t.dim() != 1 || t.numel() != n)
    throw CheckpointError(what + " is a " + std::string(c10::toString(t.scalar_type())) + " tensor of shape " +
                          c10::str(t.sizes()) + ", expected float32 [" + std::to_string(n) + "]");
  // The unpickler takes a tensor's offset and stride from the bytes without checking them against
  // its storage: a damaged one would read past it (values that differ from run to run).
  const int64_t stride = n > 1 ? t.stride(0) : 1;
  const int64_t needed = n == 0 ? 0 : (t.storage_offset() + n) * static_cast<int64_t>(sizeof(float));
  if (stride != 1 || t.storage_offset() < 0 || needed > static_cast<int64_t>(t.storage().nbytes()))
    throw CheckpointError(what + ": offset " + std::to_string(t.storage_offset()) + " and stride " +
                          std::to_string(stride) + " reach past its storage of " +
                          std::to_string(t.storage().nbytes()) + " bytes");
}

// Requires an optimizer state tuple whose tensors are 1-D float32 of `n` elements, and whose
// other fields are numbers, booleans or None.
void check_state(const c10::IValue& state, int64_t n, const std::string& what) {
  if (state.isNone()) return;
  if (!state.isTuple()) throw CheckpointError(what + " is not a tuple");
  const auto fields = state.toTuple()->elements().vec();
  for (size_t f = 0; f < fields.size(); ++f) {
    const c10::IValue& v = fields[f];
    if (v.isTensor()) check_elements(v, n, what + " field " + std::to_string(f));
    else if (!v.isInt() && !v.isDouble() && !v.isBool() && !v.isNone())
      throw CheckpointError(what + " field " + std::to_string(f) + " is a " + v.tagKind());
  }
}

void check_options(const c10::IValue& options, const std::string& what) {
  if (options.isNone()) return;
  if (!options.isTuple()) throw CheckpointError(what + " is not a tuple");
  for (const auto& v : options.toTuple()->elements().vec())
    if (!v.isInt() && !v.isDouble() && !v.isBool()) throw CheckpointError(what + " holds a " + v.tagKind());
}

// Parses rank `rank`'s file from its `bytes` (already checksummed) and files its pieces under `out`.
void read_rank_file(const std::string& file, const std::vector<char>& bytes, int rank, const CheckpointManifest& m,
                    std::vector<std::vector<CheckpointPiece>>& out) {
  c10::IValue saved;
  try {
    check_zip_archive(bytes, file);  // LibTorch's reader leaks when its constructor throws
    saved = torch::pickle_load(bytes);
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError(file + ": does not unpickle: " + e.what());
  }
  try {
    const auto header = tuple_of(saved, 5, "the file");
    if (!header[0].isString() || header[0].toStringRef() != kCheckpointFormat)
      throw CheckpointError("not a " + std::string(kCheckpointFormat) + " rank file");
    if (!header[1].isInt() || header[1].toInt() != m.world_size || !header[2].isInt() || header[2].toInt() != rank)
      throw CheckpointError("its header names another rank or world than rank " + std::to_string(rank) + " of " +
                            std::to_string(m.world_size));
    if (!header[3].isInt() || header[3].toInt() != m.micro_steps)
      throw CheckpointError("its micro-step count differs from the manifest's");
    if (!header[4].isList()) throw CheckpointError("its entries are not a list");
    const auto entries = header[4].toListRef();
    size_t next = 0;
    for (size_t i = 0; i < m.params.size(); ++i) {
      const ManifestParam& p = m.params[i];
      for (const ManifestShard& shard : p.shards) {
        if (shard.rank != rank) continue;
        const std::string what = "entry " + std::to_string(next) + " ('" + p.path + "' [" +
                                 std::to_string(shard.begin) + ", " + std::to_string(shard.end) + "))";
        if (next >= entries.size()) throw CheckpointError(what + " is missing");
        const auto fields = tuple_of(entries[next++], 5, what);
        if (!fields[0].isString() || fields[0].toStringRef() != p.path || !fields[1].isInt() ||
            fields[1].toInt() != shard.begin)
          throw CheckpointError(what + " holds another parameter or range");
        const int64_t n = shard.end - shard.begin;
        check_elements(fields[2], n, what + " elements");
        check_state(fields[3], n, what + " optimizer state");
        check_options(fields[4], what + " optimizer options");
        out[i].push_back(CheckpointPiece{rank, shard.begin, fields[2].toTensor(), fields[3], fields[4]});
      }
    }
    if (next != entries.size())
      throw CheckpointError("holds " + std::to_string(entries.size()) + " entries, the manifest lists " +
                            std::to_string(next));
  } catch (const c10::Error& e) {
    throw CheckpointError(file + ": " + e.what_without_backtrace());
  } catch (const CheckpointError& e) {
    throw CheckpointError(file + ": " + e.what());
  }
}

}  // namespace

std::string manifest_path(const std::string& dir) { return (fs::path(dir) / kManifestName).string(); }

LoadedCheckpoint read_checkpoint(const std::string& dir) {
  LoadedCheckpoint out;
  out.dir = dir;
  const std::string manifest_file = manifest_path(dir);
  if (!fs::exists(manifest_file)) {
    bool old_format = false;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec))
      old_format |= entry.path().filename().string().rfind("zero3_rank", 0) == 0;
    if (!fs::is_directory(dir, ec)) throw CheckpointError(dir + ": no such checkpoint directory");
    throw CheckpointError(manifest_file + (old_format ? ": missing: rank files without a manifest are an older format "
                                                        "(zero3-shards/2) or a save that did not finish"
                                                      : ": missing: not a complete checkpoint"));
  }
  const std::vector<char> text = read_bytes(manifest_file);
  out.manifest = CheckpointManifest::parse(std::string_view(text.data(), text.size()), manifest_file);
  const CheckpointManifest& m = out.manifest;
  // Every file's size and checksum before any of them is parsed: a damaged byte is named as
  // damage, not as whatever the unpickler makes of it.
  std::vector<std::vector<char>> contents;
  for (const ManifestFile& f : m.files) {
    const std::string file = (fs::path(dir) / f.name).string();
    if (!fs::exists(file)) throw CheckpointError(file + ": missing (the manifest lists it)");
    contents.push_back(read_bytes(file));
    const uint64_t bytes = contents.back().size();
    const uint32_t crc = crc32c(contents.back().data(), contents.back().size());
    if (bytes != f.bytes)
      throw CheckpointError(file + ": " + std::to_string(bytes) + " bytes, the manifest says " +
                            std::to_string(f.bytes) + (bytes < f.bytes ? " (truncated, or another file)" : " (grown, or another file)"));
    if (crc != f.crc32c)
      throw CheckpointError(file + ": CRC-32C " + hex(crc) + ", the manifest says " + hex(f.crc32c) +
                            " (damaged, or another rank's file)");
  }
  out.pieces.assign(m.params.size(), {});
  for (size_t r = 0; r < m.files.size(); ++r)
    read_rank_file((fs::path(dir) / m.files[r].name).string(), contents[r], static_cast<int>(r), m, out.pieces);
  return out;
}

at::Tensor LoadedCheckpoint::full_parameter(size_t i) const {
  const ManifestParam& p = manifest.params.at(i);
  std::vector<at::Tensor> parts;
  for (const auto& piece : pieces.at(i)) parts.push_back(piece.elements);
  const at::Tensor flat = parts.empty() ? at::zeros({0}) : at::cat(parts);
  return flat.view(p.shape);
}

c10::IValue LoadedCheckpoint::full_state(size_t i) const {
  const ManifestParam& p = manifest.params.at(i);
  const auto& parts = pieces.at(i);
  const auto where = [&] { return dir + ": optimizer state of '" + p.path + "'"; };
  size_t with_state = 0;
  for (const auto& piece : parts) with_state += piece.state.isNone() ? 0 : 1;
  if (with_state == 0) return c10::IValue();
  if (with_state != parts.size()) throw CheckpointError(where() + ": some shards have it, others not");
  const auto first = parts[0].state.toTuple()->elements().vec();
  std::vector<c10::IValue> joined;
  for (size_t f = 0; f < first.size(); ++f) {
    std::vector<at::Tensor> tensors;
    for (const auto& piece : parts) {
      const auto fields = piece.state.toTuple()->elements().vec();
      if (fields.size() != first.size() || fields[f].tagKind() != first[f].tagKind())
        throw CheckpointError(where() + ": its shards disagree on field " + std::to_string(f));
      if (fields[f].isTensor()) tensors.push_back(fields[f].toTensor());
      else if (fields[f].isInt() && fields[f].toInt() != first[f].toInt())
        throw CheckpointError(where() + ": its shards disagree on field " + std::to_string(f) + " (" +
                              std::to_string(fields[f].toInt()) + " vs " + std::to_string(first[f].toInt()) + ")");
    }
    joined.push_back(first[f].isTensor() ? c10::IValue(at::cat(tensors)) : first[f]);
  }
  return c10::ivalue::Tuple::create(std::move(joined));
}

}  // namespace zero3
