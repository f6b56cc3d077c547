// Fault injection on checkpoints: every kind of damage is a CheckpointError naming the file and
// what is wrong, and a refused load leaves the engine exactly as it was. Prints the corruption
// table (damage -> error) that the note quotes.
#include <gtest/gtest.h>

#include "engine/checkpoint_manifest.h"
#include "engine/checkpoint_reader.h"
#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/optimizer_rebuild.h"
#include "engine/tests/test_configs.h"
#include "engine/testing/training.h"
#include "engine/testing/engine_snapshot.h"
#include "engine/testing/models.h"
#include "harness/world/world.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <mutex>
#include <unistd.h>

namespace zero3 {
namespace {

namespace fs = std::filesystem;
using zerocheck::engine_state_snapshot;
using zerocheck::same_engine_state;

std::vector<char> read_all(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

void write_all(const fs::path& file, const std::vector<char>& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Flips the bits of `mask` in the byte at `offset` (0x01 keeps a decimal digit a digit).
void flip_bit(const fs::path& file, size_t offset, int mask = 0x10) {
  auto bytes = read_all(file);
  ASSERT_LT(offset, bytes.size()) << file;
  bytes[offset] = static_cast<char>(bytes[offset] ^ mask);
  write_all(file, bytes);
}

// Returns the offset of `needle`'s bytes in `file` (npos when absent).
size_t find_bytes(const fs::path& file, const void* needle, size_t size) {
  const auto bytes = read_all(file);
  const auto* begin = static_cast<const char*>(needle);
  auto it = std::search(bytes.begin(), bytes.end(), begin, begin + size);
  return it == bytes.end() ? std::string::npos : static_cast<size_t>(it - bytes.begin());
}

size_t find_text(const fs::path& file, const std::string& text) { return find_bytes(file, text.data(), text.size()); }

// Returns the offset of the last digit of the first number after `text` in `file`.
size_t digit_after(const fs::path& file, const std::string& text) {
  const auto bytes = read_all(file);
  size_t at = find_text(file, text);
  if (at == std::string::npos) return at;
  for (at += text.size(); at < bytes.size(); ++at)
    if (bytes[at] >= '1' && bytes[at] <= '9') break;
  // The number's last digit: flipping its low bit changes the value and keeps the JSON valid.
  while (at + 1 < bytes.size() && bytes[at + 1] >= '0' && bytes[at + 1] <= '9') ++at;
  return at < bytes.size() ? at : std::string::npos;
}

struct Damage {
  std::string what;                               // the damage, in words
  std::function<void(const fs::path& dir)> apply;  // applied to a fresh copy of a good checkpoint
};

std::string scratch(const std::string& name) {
  return (fs::temp_directory_path() / ("zerocheck_corrupt_" + name + "_" + std::to_string(::getpid()))).string();
}

void save_model(const std::string& model, const std::string& optimizer, int world, const std::string& dir,
                int64_t steps) {
  zerocheck::make_world(world)->run([&](Comm& comm) {
    const auto spec = zerocheck::model_spec(model);
    auto m = spec.build(3);
    auto user = optimizer == "sgd" ? zerocheck::sgd_factory(0.1, 0.9)(unique_parameters(*m))
                                   : zerocheck::adam_factory(0.05)(unique_parameters(*m));
    const Config config = all_partitioned();
    auto engine = initialize(m, *user, config, comm);
    for (int64_t s = 0; s < steps; ++s) {
      const auto batch = zerocheck::make_batch(spec, 3, s, comm.rank(), 2);
      engine->backward(zerocheck::training_loss(engine->forward(batch.input), batch.target));
      engine->step();
      engine->zero_grad();
    }
    engine->save_checkpoint(dir);
  });
}

// Everything a load could change: shards, optimizer state and the optimizer's options.
TEST(CheckpointCorruption, EveryDamageIsACheckpointErrorNamingTheFileAndTheEngineIsUnchanged) {
  const std::string good = scratch("good"), later = scratch("later"), other_model = scratch("mlp"),
                    other_optimizer = scratch("sgd");
  save_model("odd", "adam", 2, good, 1);
  save_model("odd", "adam", 2, later, 2);
  save_model("mlp", "adam", 2, other_model, 1);
  save_model("odd", "sgd", 2, other_optimizer, 1);
  const fs::path rank0 = fs::path(good) / rank_file_name(0, 2);
  const std::string manifest = kManifestName, r0 = rank_file_name(0, 2), r1 = rank_file_name(1, 2);

  // Where the byte classes lie in the good checkpoint's files.
  const LoadedCheckpoint loaded = read_checkpoint(good);
  const at::Tensor some_elements = loaded.pieces.at(0).at(0).elements;
  const size_t tensor_at = find_bytes(rank0, some_elements.data_ptr(), 16);
  ASSERT_NE(tensor_at, std::string::npos) << "the first shard's bytes are not in " << rank0;
  const size_t pickle_at = find_text(rank0, "zero3-checkpoint/3");  // the pickled header tuple
  ASSERT_NE(pickle_at, std::string::npos);
  const size_t file_size = fs::file_size(rank0);
  const fs::path good_manifest = fs::path(good) / manifest;
  const size_t crc_at = digit_after(good_manifest, "\"crc32c\": ");
  const size_t shape_at = digit_after(good_manifest, "\"shape\": [");
  ASSERT_NE(crc_at, std::string::npos);
  ASSERT_NE(shape_at, std::string::npos);
  const size_t format_at = find_text(good_manifest, "zero3-checkpoint");

  auto copy_from = [](const std::string& source, const std::string& name) {
    return [source, name](const fs::path& dir) { fs::copy_file(fs::path(source) / name, dir / name,
                                                                fs::copy_options::overwrite_existing); };
  };
  const std::vector<Damage> damages = {
      {"rank file: bit flipped in its zip header (byte 0)", [&](const fs::path& d) { flip_bit(d / r0, 0); }},
      {"rank file: bit flipped in the pickled header tuple", [&](const fs::path& d) { flip_bit(d / r0, pickle_at + 2); }},
      {"rank file: bit flipped in tensor data", [&](const fs::path& d) { flip_bit(d / r0, tensor_at + 5); }},
      {"rank file: bit flipped in the zip central directory (last bytes)",
       [&](const fs::path& d) { flip_bit(d / r0, file_size - 10); }},
      {"rank file: truncated to half", [&](const fs::path& d) { fs::resize_file(d / r0, file_size / 2); }},
      {"rank file: one byte appended", [&](const fs::path& d) { fs::resize_file(d / r0, file_size + 1); }},
      {"rank file: removed", [&](const fs::path& d) { fs::remove(d / r1); }},
      {"rank files: rank 0's and rank 1's swapped",
       [&](const fs::path& d) {
         fs::rename(d / r0, d / "tmp");
         fs::rename(d / r1, d / r0);
         fs::rename(d / "tmp", d / r1);
       }},
      {"rank file: from a later save of the same model", copy_from(later, r1)},
      {"manifest: removed (a save that never finished)", [&](const fs::path& d) { fs::remove(d / manifest); }},
      {"manifest: truncated to half",
       [&](const fs::path& d) { fs::resize_file(d / manifest, fs::file_size(d / manifest) / 2); }},
      {"manifest: bit flipped in a checksum", [&](const fs::path& d) { flip_bit(d / manifest, crc_at, 0x01); }},
      {"manifest: bit flipped in a shape", [&](const fs::path& d) { flip_bit(d / manifest, shape_at, 0x01); }},
      {"manifest: bit flipped in the format string", [&](const fs::path& d) { flip_bit(d / manifest, format_at + 2); }},
      {"manifest: world size 3 over two rank files",
       [&](const fs::path& d) {
         auto bytes = read_all(d / manifest);
         std::string text(bytes.begin(), bytes.end());
         text.replace(text.find("\"world_size\": 2"), 15, "\"world_size\": 3");
         write_all(d / manifest, std::vector<char>(text.begin(), text.end()));
       }},
      {"manifest and rank files: another model's (mlp)",
       [&](const fs::path& d) {
         fs::remove_all(d);
         fs::copy(other_model, d);
       }},
      {"manifest and rank files: an SGD checkpoint loaded by Adam",
       [&](const fs::path& d) {
         fs::remove_all(d);
         fs::copy(other_optimizer, d);
       }},
      {"old format: rank files of zero3-shards/2 without a manifest",
       [&](const fs::path& d) {
         fs::remove(d / manifest);
         write_all(d / "zero3_rank0_of2.pt", std::vector<char>{'o', 'l', 'd'});
       }},
      {"directory: does not exist", [&](const fs::path& d) { fs::remove_all(d); }},
  };

  std::vector<std::pair<std::string, std::string>> table(damages.size());
  std::mutex mutex;
  const std::string work = scratch("case");
  zerocheck::make_world(2)->run([&](Comm& comm) {
    const auto spec = zerocheck::model_spec("odd");
    auto model = spec.build(9);
    auto user = zerocheck::adam_factory(0.05)(unique_parameters(*model));
    const Config config = all_partitioned();
    auto engine = initialize(model, *user, config, comm);
    const auto batch = zerocheck::make_batch(spec, 9, 0, comm.rank(), 2);
    engine->backward(zerocheck::training_loss(engine->forward(batch.input), batch.target));
    engine->step();
    for (size_t i = 0; i < damages.size(); ++i) {
      comm.barrier();
      if (comm.rank() == 0) {
        fs::remove_all(work);
        fs::copy(good, work);
        damages[i].apply(work);
      }
      comm.barrier();
      const auto before = engine_state_snapshot(*engine);
      std::string error = "(loaded without an error)";
      try {
        engine->load_checkpoint(work);
      } catch (const CheckpointError& e) {
        error = e.what();
      }
      EXPECT_TRUE(same_engine_state(before, engine_state_snapshot(*engine))) << damages[i].what << ": the refused load changed the engine";
      EXPECT_NE(error.find(work), std::string::npos) << damages[i].what << ": the error names no file: " << error;
      if (comm.rank() == 0) {
        std::lock_guard<std::mutex> lock(mutex);
        table[i] = {damages[i].what, error};
      }
    }
    // The same engine still loads the undamaged checkpoint: the refusals were the damage's.
    engine->load_checkpoint(good);
  });
  std::cout << "\nCorruption table (damage -> error printed):\n";
  for (const auto& [what, error] : table) {
    std::cout << "| " << what << " | " << error << " |\n";
    EXPECT_NE(error, "(loaded without an error)") << what;
  }
  for (const auto& dir : {good, later, other_model, other_optimizer, work}) fs::remove_all(dir);
}

}  // namespace
}  // namespace zero3
