// `zerocheck checkpoint`: look into a checkpoint directory without an engine.
//   inspect DIR            the manifest, every file's size, and whether everything verifies
//                          (exit 0 verified, 1 damaged, 2 no checkpoint there)
//   export DIR --out FILE  the full parameters, by the user's module paths, as one pickled
//                          dict that torch.load (Python) and torch::pickle_load (C++) read
#include "engine/checkpoint_reader.h"
#include "engine/errors.h"
#include "harness/cli/command.h"

#include <ATen/ATen.h>
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>

namespace zerocheck::cli {
namespace {

namespace fs = std::filesystem;

struct CheckpointArgs {
  std::string dir;
  std::string out;
};

std::string shards_text(const zero3::ManifestParam& p) {
  std::vector<std::string> parts;
  for (const auto& s : p.shards) parts.push_back(fmt::format("r{}[{},{})", s.rank, s.begin, s.end));
  return fmt::format("{}", fmt::join(parts, " "));
}

int inspect(const std::string& dir) {
  if (!fs::is_directory(dir)) throw zero3::UsageError("checkpoint inspect: no directory " + dir);
  // The manifest alone first, so a damaged rank file still shows what the checkpoint should be.
  std::ifstream in(zero3::manifest_path(dir), std::ios::binary);
  if (in) {
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    try {
      const auto m = zero3::CheckpointManifest::parse(text, zero3::manifest_path(dir));
      fmt::print("checkpoint {}\nformat {}, saved by {} ranks after {} micro-steps\n", dir, m.format, m.world_size,
                 m.micro_steps);
      fmt::print("optimizer {}: {}\n", m.optimizer, m.optimizer_groups.dump());
      if (!m.client_state.empty()) fmt::print("client state: {}\n", m.client_state.dump());
      fmt::print("{:<28} {:<14} {:<12} {:>5}  {}\n", "parameter", "shape", "kind", "owner", "shards");
      for (const auto& p : m.params)
        fmt::print("{:<28} {:<14} {:<12} {:>5}  {}\n", p.path + (p.trainable ? "" : " (frozen)"),
                   fmt::format("[{}]", fmt::join(p.shape, ",")), p.kind, p.owner, shards_text(p));
      fmt::print("{:<24} {:>12} {:>12}\n", "file", "bytes", "crc32c");
      for (const auto& f : m.files) fmt::print("{:<24} {:>12} {:>#12x}\n", f.name, f.bytes, f.crc32c);
      fmt::print("{:<24} {:>12}\n", zero3::kManifestName, text.size());
    } catch (const zero3::CheckpointError&) {
      // reported by the verification below
    }
  }
  try {
    const auto c = zero3::read_checkpoint(dir);
    fmt::print("verification: ok ({} rank files and the manifest verify)\n", c.manifest.files.size());
    return kExitOk;
  } catch (const zero3::CheckpointError& e) {
    fmt::print("verification: FAILED: {}\n", e.what());
    return kExitViolation;
  }
}

void export_parameters(const std::string& dir, const std::string& out) {
  const auto c = zero3::read_checkpoint(dir);  // CheckpointError: exit 2, bad input
  c10::Dict<std::string, at::Tensor> params;
  for (size_t i = 0; i < c.manifest.params.size(); ++i)
    params.insert(c.manifest.params[i].path, c.full_parameter(i));
  const std::vector<char> bytes = torch::pickle_save(params);
  std::ofstream file(out, std::ios::binary | std::ios::trunc);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  file.close();
  if (!file) throw zero3::UsageError("checkpoint export: cannot write " + out);
  fmt::print("wrote {} parameters ({} bytes) to {}\n", params.size(), bytes.size(), out);
}

}  // namespace

void register_checkpoint_command(CLI::App& command, int& exit_code) {
  auto args = std::make_shared<CheckpointArgs>();
  command.require_subcommand(1);
  CLI::App* inspect_cmd = command.add_subcommand("inspect", "print the manifest, sizes and the verification result");
  inspect_cmd->add_option("dir", args->dir, "checkpoint directory")->required();
  inspect_cmd->callback([args, &exit_code] { exit_code = inspect(args->dir); });
  CLI::App* export_cmd =
      command.add_subcommand("export", "write the full parameters as one file torch.load reads (a dict by path)");
  export_cmd->add_option("dir", args->dir, "checkpoint directory")->required();
  export_cmd->add_option("--out", args->out, "output file")->required();
  export_cmd->callback([args, &exit_code] {
    export_parameters(args->dir, args->out);
    exit_code = kExitOk;
  });
}

}  // namespace zerocheck::cli
