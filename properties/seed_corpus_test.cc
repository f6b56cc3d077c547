// The scenario_ops seed corpus (fuzz/corpus/scenario_ops/): what it must kill, and how it is made.
//
// The seeds are byte strings, so they mean what the decoder (harness/scenario/bytes.h over
// harness/scenario/draw/) makes of them: a change to the draw changes every seed's scenario. This test
// replays each seed on the reference engine and on every fault of engine/faults.h and requires
// the corpus to kill every fault but those listed in kNotKilledBySeeds; when the draw changes and
// it fails, regenerate the corpus (SeedCorpus.DISABLED_Regenerate below) rather than editing seeds:
//
//   mkdir /tmp/seeds && ZEROCHECK_SEED_CORPUS_OUT=/tmp/seeds build/dev/bin/property_tests
//       --gtest_also_run_disabled_tests --gtest_filter=SeedCorpus.DISABLED_Regenerate   (one line)
//   rm fuzz/corpus/scenario_ops/* && cp /tmp/seeds/* fuzz/corpus/scenario_ops/
#include <gtest/gtest.h>

#include "engine/faults.h"
#include "harness/interpreter/interpreter.h"
#include "harness/scenario/bytes.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace zerocheck {
namespace {

// Faults no seed is required to kill (the fuzzer has to find them), besides every deep fault
// (ZERO3_DEEP_FAULTS: what a campaign finds from an empty corpus is what they measure, so the
// regeneration below does not look for seeds that kill them) and every fp16 fault (FaultInfo::fp16:
// the seeds decode through the default draw, which never draws fp16).
const std::set<std::string> kNotKilledBySeeds = {};

using Bytes = std::vector<uint8_t>;

// Runs the bytes as the scenario_ops target does: decoded, through JSON, then the interpreter.
struct Replay {
  Scenario scenario;
  bool reference_holds = false;
};
Replay decode_seed(const Bytes& bytes) {
  Replay out;
  out.scenario = parse_scenario(to_json(scenario_from_bytes(bytes.data(), bytes.size())).dump());
  out.reference_holds = run_scenario(out.scenario, RunOptions{}).ok();
  return out;
}
bool kills(const Scenario& s, zero3::Fault fault) { return !run_scenario(s, RunOptions{fault}).ok(); }

// The search's candidates: uniform random bytes, one stream per (length, round).
Bytes candidate(size_t length, int round) {
  std::mt19937_64 random(length * 7919 + static_cast<size_t>(round));
  Bytes bytes(length);
  for (auto& b : bytes) b = static_cast<uint8_t>(random());
  return bytes;
}

Bytes read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string summary(const Scenario& s) {
  std::string nodes, ops;
  for (const auto& node : s.tree) nodes += (nodes.empty() ? "" : " ") + node.kind;
  for (const auto& op : s.ops) ops += (ops.empty() ? "" : " ") + std::string(to_string(op.kind));
  return fmt::format("world {}, placement {}, tree [{}], {} ops [{}]", s.world_size, zero3::to_string(s.placement.kind),
                     nodes, s.ops.size(), ops);
}

TEST(SeedCorpus, HoldsOnTheReferenceAndKillsEveryFault) {
  std::map<std::string, std::vector<std::string>> killers;
  int seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(ZEROCHECK_SCENARIO_OPS_CORPUS)) {
    if (entry.path().extension() != ".bin") continue;
    ++seeds;
    const Replay replay = decode_seed(read_file(entry.path()));
    EXPECT_TRUE(replay.reference_holds) << entry.path() << ": the reference engine fails it";
    for (const auto& info : zero3::fault_catalogue())
      if (kills(replay.scenario, info.fault)) killers[std::string(info.name)].push_back(entry.path().filename());
  }
  EXPECT_GT(seeds, 0) << "no seeds in " << ZEROCHECK_SCENARIO_OPS_CORPUS;
  for (const auto& info : zero3::fault_catalogue()) {
    const std::string name(info.name);
    // An fp16 fault (FaultInfo::fp16) bites only in an fp16 scenario, and a seed decodes through
    // the default draw, which never draws fp16 (the corpora are the same on every lane, and
    // DeepSpeed's CPU accelerator refuses fp16): no seed can reach it. `zerocheck mutants` kills
    // it with its own invariant from `check --fp16`'s draw where LibTorch has CPU fp16, and
    // fault_kill_tests runs its named test there.
    if (kNotKilledBySeeds.count(name) || info.deep || info.fp16) continue;
    EXPECT_FALSE(killers[name].empty()) << "no seed of " << ZEROCHECK_SCENARIO_OPS_CORPUS << " kills " << name
                                        << "; regenerate the corpus (see the top of this file)";
  }
}

// A new fault without regenerating the corpus: the shortest of the same candidates that holds on
// the reference engine and kills the fault named by $ZEROCHECK_SEED_FAULT, written into
// $ZEROCHECK_SEED_CORPUS_OUT as seed.bin (copy it in as kills_<fault>_<length>b.bin, the
// regeneration's naming: this test reads the .bin seeds):
//
//   ZEROCHECK_SEED_FAULT=live-limit-ignored ZEROCHECK_SEED_CORPUS_OUT=/tmp/seeds build/dev/bin/property_tests
//       --gtest_also_run_disabled_tests --gtest_filter=SeedCorpus.DISABLED_AddKillerOf   (one line)
TEST(SeedCorpus, DISABLED_AddKillerOf) {
  const char* out_dir = std::getenv("ZEROCHECK_SEED_CORPUS_OUT");
  const char* fault_name = std::getenv("ZEROCHECK_SEED_FAULT");
  ASSERT_TRUE(out_dir != nullptr && *out_dir != '\0') << "set ZEROCHECK_SEED_CORPUS_OUT to an empty folder";
  ASSERT_TRUE(fault_name != nullptr) << "set ZEROCHECK_SEED_FAULT to a catalogue fault";
  const auto fault = zero3::fault_by_name(fault_name);
  ASSERT_TRUE(fault.has_value()) << fault_name << " is not a catalogue fault";
  for (size_t length = 0; length <= 640; length += 8)
    for (int round = 0; round < (length == 0 ? 1 : 16); ++round) {
      const Bytes bytes = candidate(length, round);
      const Replay replay = decode_seed(bytes);
      if (!replay.reference_holds || !kills(replay.scenario, *fault)) continue;
      std::ofstream out(std::filesystem::path(out_dir) / "seed.bin", std::ios::binary);
      out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      std::cout << fault_name << ": " << bytes.size() << " bytes, " << summary(replay.scenario) << "\n";
      return;
    }
  ADD_FAILURE() << "no candidate up to 640 bytes kills " << fault_name;
}

// Searches seeded random byte strings in order of length and keeps the shortest that kills each
// fault (one file may kill several) and the shortest that shows each operation kind, node kind
// and placement kind the fault killers leave out; every kept seed holds on the reference engine.
// Writes them into $ZEROCHECK_SEED_CORPUS_OUT and prints what each decodes to and kills (no
// listing goes into the folder: libFuzzer would take it for a seed).
TEST(SeedCorpus, DISABLED_Regenerate) {
  const char* out_dir = std::getenv("ZEROCHECK_SEED_CORPUS_OUT");
  ASSERT_TRUE(out_dir != nullptr && *out_dir != '\0') << "set ZEROCHECK_SEED_CORPUS_OUT to an empty folder";
  constexpr int kRounds = 16;
  constexpr size_t kLongest = 640, kStep = 8;

  struct Kept {
    Bytes bytes;
    Scenario scenario;
    std::vector<std::string> kills;
    std::string reason;
  };
  std::map<std::string, Kept> by_fault;  // fault name -> its shortest killer
  std::map<std::string, Kept> by_kind;   // "op save", "node MoE", "placement map" -> shortest showing it
  auto kinds_of = [](const Scenario& s) {
    std::set<std::string> out;
    for (const auto& op : s.ops) out.insert(fmt::format("op {}", to_string(op.kind)));
    for (const auto& node : s.tree) out.insert("node " + node.kind);
    out.insert(fmt::format("placement {}", zero3::to_string(s.placement.kind)));
    return out;
  };
  const size_t all_kinds = schema::op_rows().size() + schema::node_kinds().size() + 3;
  size_t single_faults = 0;
  for (const auto& info : zero3::fault_catalogue()) single_faults += !info.deep && !info.fp16;  // fp16: no seed
  int rejected = 0;
  for (size_t length = 0; length <= kLongest; length += kStep) {
    for (int round = 0; round < (length == 0 ? 1 : kRounds); ++round) {
      const Bytes bytes = candidate(length, round);
      const Replay replay = decode_seed(bytes);
      if (!replay.reference_holds) {
        ++rejected;  // a finding on the reference engine: not a seed (the replay tests would fail)
        continue;
      }
      for (const auto& info : zero3::fault_catalogue()) {
        const std::string name(info.name);
        if (info.deep || info.fp16 || by_fault.count(name) || !kills(replay.scenario, info.fault)) continue;
        by_fault[name] = {bytes, replay.scenario, {}, "kills " + name};
      }
      for (const auto& kind : kinds_of(replay.scenario))
        if (!by_kind.count(kind)) by_kind[kind] = {bytes, replay.scenario, {}, "shows " + kind};
      if (by_fault.size() == single_faults && by_kind.size() == all_kinds) break;
    }
    if (by_fault.size() == single_faults && by_kind.size() == all_kinds) break;
  }

  // Long inputs too, so libFuzzer starts from full-length scenarios as well as minimal ones.
  std::vector<Kept> long_ones;
  for (size_t length : {256, 448, 640})
    for (int round = 0; round < kRounds; ++round) {
      const Bytes bytes = candidate(length, round);
      const Replay replay = decode_seed(bytes);
      if (!replay.reference_holds) continue;
      long_ones.push_back({bytes, replay.scenario, {}, "long random"});
      break;
    }

  // One file per distinct byte string: the fault killers, then the kinds they do not show.
  std::map<Bytes, Kept> kept;
  std::set<std::string> shown;
  for (auto& [name, k] : by_fault)
    if (!kept.count(k.bytes)) {
      for (const auto& kind : kinds_of(k.scenario)) shown.insert(kind);
      kept[k.bytes] = k;
    }
  for (auto& [kind, k] : by_kind)
    if (!shown.count(kind) && !kept.count(k.bytes)) {
      for (const auto& also : kinds_of(k.scenario)) shown.insert(also);
      kept[k.bytes] = k;
    }
  for (auto& k : long_ones)
    if (!kept.count(k.bytes)) kept[k.bytes] = k;
  std::map<std::string, std::string> listing;  // by file name
  std::set<std::string> killed;
  for (auto& [bytes, k] : kept) {
    for (const auto& info : zero3::fault_catalogue())
      if (kills(k.scenario, info.fault)) k.kills.push_back(std::string(info.name)), killed.insert(std::string(info.name));
    std::string file = fmt::format("{}_{}b", k.reason, bytes.size());
    for (char& c : file)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    file += ".bin";
    std::ofstream(std::filesystem::path(out_dir) / file, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    listing[file] = fmt::format("- `{}`: {}; kills {}\n", file, summary(k.scenario),
                                k.kills.empty() ? std::string("nothing") : fmt::format("{}", fmt::join(k.kills, ", ")));
  }
  for (const auto& [file, line] : listing) std::cout << line;
  std::vector<std::string> missed;
  for (const auto& info : zero3::fault_catalogue())
    if (!killed.count(std::string(info.name))) missed.push_back(std::string(info.name));
  std::cout << fmt::format("No seed kills: {}.\n", missed.empty() ? std::string("(none)") : fmt::format("{}", fmt::join(missed, ", ")))
            << fmt::format("({} candidates failed on the reference engine and were skipped)\n", rejected);
}

}  // namespace
}  // namespace zerocheck
