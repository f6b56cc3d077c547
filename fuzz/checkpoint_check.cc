#include "fuzz/checkpoint_check.h"

#include "engine/checkpoint_manifest.h"
#include "engine/checkpoint_reader.h"
#include "engine/crc32c.h"
#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/local_comm.h"
#include "engine/optimizer_rebuild.h"
#include "engine/testing/training.h"
#include "engine/testing/engine_snapshot.h"
#include "engine/testing/models.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <unistd.h>

namespace zerocheck::fuzz {
namespace {

namespace fs = std::filesystem;

// The fixed model every input loads into, built once per process.
struct Target {
  std::unique_ptr<zero3::Comm> comm;
  std::shared_ptr<zero3::Module> model;
  std::unique_ptr<torch::optim::Optimizer> user;
  std::unique_ptr<zero3::Engine> engine;
  std::string dir;

  Target() {
    at::set_num_threads(1);
    comm = zero3::LocalCommGroup::create(1, zero3::CommOptions{})->comm_for(0);
    const ModelSpec spec = model_spec("odd");
    model = spec.build(1);
    user = adam_factory(0.05)(zero3::unique_parameters(*model));
    zero3::Config config;
    config.zero_optimization.stage3_param_persistence_threshold = 0;
    engine = zero3::initialize(model, *user, config, *comm);
    const Batch batch = make_batch(spec, 1, 0, 0, 2);
    engine->backward(training_loss(engine->forward(batch.input), batch.target));
    engine->step();
    engine->zero_grad();
    dir = (fs::temp_directory_path() / ("zerocheck_fuzz_checkpoint_" + std::to_string(::getpid()))).string();
  }
};

Target& target() {
  static Target t;
  return t;
}

void write(const fs::path& file, std::string_view data) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// Unpacks the bundle into `dir`; returns the flags.
uint8_t unpack(std::string_view bytes, const fs::path& dir) {
  static const std::regex allowed(R"(manifest\.json|zero3_rank[0-9]{1,2}_of[0-9]{1,2}\.pt)");
  if (bytes.empty()) return 0;
  const uint8_t flags = static_cast<uint8_t>(bytes[0]);
  size_t at = 1;
  while (at < bytes.size()) {
    const size_t name_size = static_cast<uint8_t>(bytes[at++]);
    if (at + name_size + 4 > bytes.size()) break;
    const std::string name(bytes.substr(at, name_size));
    at += name_size;
    uint32_t size = 0;
    for (int i = 0; i < 4; ++i) size |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + i])) << (8 * i);
    at += 4;
    const std::string_view data = bytes.substr(at, std::min<size_t>(size, bytes.size() - at));
    at += data.size();
    if (std::regex_match(name, allowed)) write(dir / name, data);
  }
  return flags;
}

// Rewrites the manifest's sizes and checksums to the files' own, when the manifest parses.
void refresh_checksums(const fs::path& dir) {
  std::ifstream in(dir / zero3::kManifestName, std::ios::binary);
  if (!in) return;
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  try {
    zero3::CheckpointManifest m = zero3::CheckpointManifest::parse(text, "bundle");
    for (auto& f : m.files)
      if (fs::exists(dir / f.name)) f.crc32c = zero3::crc32c_of_file((dir / f.name).string(), &f.bytes);
    write(dir / zero3::kManifestName, m.to_json());
  } catch (const zero3::CheckpointError&) {
    // left as it is: the loader must refuse it the same way
  }
}

}  // namespace

ParseCheck check_checkpoint(std::string_view bytes) {
  Target& t = target();
  ParseCheck result;
  std::error_code ignored;
  fs::remove_all(t.dir, ignored);
  fs::create_directories(t.dir);
  const uint8_t flags = unpack(bytes, t.dir);
  if (flags & 1) refresh_checksums(t.dir);
  const auto before = engine_state_snapshot(*t.engine);
  try {
    t.engine->load_checkpoint(t.dir);
    result.parsed = true;
  } catch (const zero3::CheckpointError& e) {
    result.refusal = e.what();
    if (!same_engine_state(before, engine_state_snapshot(*t.engine)))
      result.finding = Finding{"checkpoint: a refused load changed the engine",
                               std::string("refused with: ") + e.what()};
  } catch (const std::exception& e) {
    result.finding = Finding{"checkpoint: " + exception_type(e) + " escaped load_checkpoint",
                             exception_type(e) + ": " + e.what()};
  }
  fs::remove_all(t.dir, ignored);
  return result;
}

}  // namespace zerocheck::fuzz
