// The zerocheck binary as users and CI run it: exit codes, JSON keys, fail-fast.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <sys/wait.h>
#include <unistd.h>

namespace {

struct CliRun {
  int exit_code;
  std::string output;
};

CliRun run_shell(const std::string& command) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string output;
  std::array<char, 4096> buffer{};
  while (size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

CliRun run_cli(const std::string& args) { return run_shell(std::string(ZEROCHECK_BINARY) + " " + args + " 2>&1"); }

// stdout alone, for a document parsed as JSON: stdout holds only the document whatever goes to
// stderr (under ASan, its one-time swapcontext warning when a fiber world starts). stderr is
// appended after a marker where the run failed, so an assertion on exit_code still shows it.
CliRun run_cli_stdout(const std::string& args) {
  const std::string errors =
      (std::filesystem::temp_directory_path() / ("zerocheck-cli-stderr-" + std::to_string(::getpid()))).string();
  CliRun run = run_shell(std::string(ZEROCHECK_BINARY) + " " + args + " 2>" + errors);
  std::ifstream in(errors);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(errors.c_str());
  if (run.exit_code != 0) run.output += "\n--- stderr ---\n" + text;
  return run;
}

// Runs a command line exactly as zerocheck printed it, with this build's zerocheck first on PATH.
CliRun run_printed(const std::string& command_line) {
  return run_shell("PATH=" + std::filesystem::path(ZEROCHECK_BINARY).parent_path().string() + ":$PATH " +
                   command_line + " 2>&1");
}

TEST(Cli, TrainJsonHasEveryKeyAndHolds) {
  const CliRun run = run_cli("train --world 4 --steps 5 --json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto json = nlohmann::json::parse(run.output);
  for (const char* key : {"world", "steps", "losses", "dense_losses", "max_param_abs_diff",
                          "state_bytes_per_rank", "expected_state_bytes_per_rank",
                          "elements_moved_per_step", "expected_elements_per_step"})
    EXPECT_TRUE(json.contains(key)) << key;
  EXPECT_EQ(json["world"], 4);
  EXPECT_EQ(json["losses"], json["dense_losses"]);
  EXPECT_EQ(json["state_bytes_per_rank"], json["expected_state_bytes_per_rank"]);
  EXPECT_EQ(json["elements_moved_per_step"], json["expected_elements_per_step"]);
}

TEST(Cli, BenchReportsCostsAsJsonOnTheReferenceEngine) {
  const CliRun run = run_cli("bench --inputs 6 --world 2 --max-nodes 3 --max-ops 8");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto json = nlohmann::json::parse(run.output);
  EXPECT_EQ(json["inputs"], 6);
  EXPECT_EQ(json["limits"]["world"], 2);
  EXPECT_EQ(json["violations"], 0);
  EXPECT_GT(json["scenarios_per_second"].get<double>(), 0);
  EXPECT_LE(json["operations_per_scenario"].get<double>(), 8);
  // The sweeps after every operation cost ATen calls; without them there must be fewer.
  EXPECT_GT(json["aten_calls_per_scenario"].get<double>(),
            json["without_per_op_checks"]["aten_calls_per_scenario"].get<double>());
  EXPECT_FALSE(json["top_aten_calls_per_scenario"].empty());
  EXPECT_EQ(run_cli("bench --world 9").exit_code, 2);
  EXPECT_EQ(run_cli("bench --max-nodes 0").exit_code, 2);
}

TEST(Cli, BenchMeasuresTheAttributesProfileAsFuzzAttrsRunsIt) {
  // --world before --profile: the profile's limits apply first, whatever the order on the line.
  const CliRun run = run_cli_stdout("bench --inputs 6 --world 8 --profile attributes --max-nodes 40 --max-ops 12");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto json = nlohmann::json::parse(run.output);
  EXPECT_EQ(json["limits"]["profile"], "attributes");
  EXPECT_EQ(json["limits"]["world"], 8);  // beyond the training profile's 4
  EXPECT_EQ(json["limits"]["max_nodes"], 40);
  EXPECT_EQ(json["violations"], 0);
  EXPECT_EQ(nlohmann::json::parse(run_cli_stdout("bench --inputs 2 --profile attributes").output)["limits"]["world"], "1..8");
  EXPECT_EQ(run_cli("bench --profile attributes --world 9").exit_code, 2);
  EXPECT_EQ(run_cli("bench --profile dense").exit_code, 2);
}

TEST(Cli, BenchRunsAFuzzersCorpusFolder) {
  char dir_template[] = "/tmp/zerocheck-bench-corpus-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  // Three inputs, one of them empty: what a libFuzzer corpus folder holds.
  for (const auto& [name, bytes] : std::array<std::pair<const char*, std::string>, 3>{
           {{"a", ""}, {"b", std::string(40, '\x07')}, {"c", "zerocheck seed bytes of some length"}}})
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
  const CliRun run = run_cli_stdout("bench --profile attributes --corpus " + dir);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto json = nlohmann::json::parse(run.output);
  EXPECT_EQ(json["inputs"], 3);
  EXPECT_EQ(json["corpus"], dir);
  EXPECT_TRUE(json["seed"].is_null());
  EXPECT_GE(json["nodes_per_scenario"].get<double>(), 1);
  double by_kind = 0;
  for (const auto& [kind, per_scenario] : json["operations_by_kind_per_scenario"].items()) by_kind += per_scenario.get<double>();
  EXPECT_DOUBLE_EQ(by_kind, json["operations_per_scenario"].get<double>());
  EXPECT_GE(json["ranks_per_scenario"].get<double>(), 1);
  EXPECT_LE(json["ranks_per_scenario"].get<double>(), 8);
  for (const char* name : {"a", "b", "c"}) std::remove((dir + "/" + name).c_str());
  const CliRun empty = run_cli("bench --corpus " + dir);
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_NE(empty.output.find("the folder '" + dir + "' holds no file"), std::string::npos) << empty.output;
  ::rmdir(dir.c_str());
  const CliRun missing = run_cli("bench --corpus " + dir);
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.output.find("'" + dir + "' is not a folder"), std::string::npos) << missing.output;
}

TEST(Cli, APlantedFaultExitsOne) {
  const CliRun run = run_cli("train --world 2 --steps 2 --engine wrong-gradient-divisor");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("VIOLATION"), std::string::npos) << run.output;
}

TEST(Cli, ReproSeedExitCodesFollowTheVerdict) {
  const CliRun legacy = run_cli("repro seed --engine legacy-0.15.4 --world 2 --json");
  ASSERT_EQ(legacy.exit_code, 1) << legacy.output;
  const auto json = nlohmann::json::parse(legacy.output);
  for (const char* key : {"ids_before", "ids_after_init", "ids_after_reinit", "reinit_error",
                          "placement_before", "placement_after", "intact"})
    EXPECT_TRUE(json.contains(key)) << key;
  EXPECT_EQ(json["ids_after_init"][0], 2);
  EXPECT_EQ(json["ids_after_reinit"][59], 241);
  EXPECT_EQ(json["intact"], false);
  const CliRun reference = run_cli("repro seed --engine reference --world 3");
  EXPECT_EQ(reference.exit_code, 0) << reference.output;
  EXPECT_NE(reference.output.find("verdict: INTACT"), std::string::npos);
  const CliRun unknown = run_cli("repro seed --engine nonesuch");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.output.find("--engine='nonesuch' is not an engine (expected one of: reference, legacy-0.15.4"),
            std::string::npos)
      << unknown.output;
  EXPECT_EQ(run_cli("repro").exit_code, 2);
}

std::string temp_dir(const std::string& name) {
  const std::string dir = "/tmp/zerocheck_cli_" + name + "_" + std::to_string(::getpid());
  std::system(("rm -rf " + dir).c_str());
  return dir;
}

TEST(Cli, CheckPassesOnTheReferenceEngine) {
  const CliRun run = run_cli("check --engine reference --world 2 --cases 150 --json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto json = nlohmann::json::parse(run.output);
  EXPECT_EQ(json["passed"], true);
  EXPECT_EQ(json["cases_run"], 150);
  EXPECT_TRUE(json["violations"].empty());
  EXPECT_GT(json["cases_per_second"].get<double>(), 0);
}

// Eight ranks is the common node: a fixed world may be any size 1..8, though random draws stay
// in 1..4 (so the corpora keep their meaning).
TEST(Cli, CheckHoldsOnFixedWorldsWiderThanTheDrawnOnes) {
  for (const int world : {5, 8}) {
    const CliRun run = run_cli("check --engine reference --world " + std::to_string(world) + " --cases 12 --json");
    ASSERT_EQ(run.exit_code, 0) << world << "\n" << run.output;
    const auto json = nlohmann::json::parse(run.output);
    EXPECT_EQ(json["cases_run"], 12);
    EXPECT_EQ(json["passed"], true);
  }
  const CliRun nine = run_cli("check --world 9 --cases 1");
  EXPECT_EQ(nine.exit_code, 2) << nine.output;
}

TEST(Cli, ACheckViolationIsShrunkWrittenAndReplaysForEveryWorldSize) {
  for (int world = 1; world <= 8; ++world) {
    const std::string out = temp_dir("check" + std::to_string(world));
    const CliRun run = run_cli("check --engine legacy-0.15.4 --world " + std::to_string(world) +
                               " --cases 200 --json --out " + out);
    ASSERT_EQ(run.exit_code, 1) << run.output;
    const auto json = nlohmann::json::parse(run.output);
    const auto& v = json["violations"].at(0);
    EXPECT_EQ(v["invariant"], "I1");
    EXPECT_LE(v["modules"].get<int>(), 2);
    EXPECT_LE(v["ops"].get<int>(), 2);
    const std::string replay = v["replay"].get<std::string>();
    ASSERT_EQ(replay.rfind("zerocheck replay ", 0), 0u) << replay;
    for (int again = 0; again < 2; ++again) {  // deterministic: the same verdict every time
      const CliRun replayed = run_printed(replay + " --json");
      EXPECT_EQ(replayed.exit_code, 1) << replayed.output;
      EXPECT_EQ(nlohmann::json::parse(replayed.output)["violation"]["invariant"], "I1");
    }
    std::system(("rm -rf " + out).c_str());
  }
}

// Every oracle is necessary: switched off, a catalogued fault survives every other. One fault per
// oracle, each one only that oracle caught in a full run of `zerocheck mutants --ablate --no-deep`
// (41 faults x 11 oracles, 309 s of CI's 60 minutes at stop 51; this: 11 x 11): an
// oracle that stops being the only one to catch its fault fails this test as the full run would.
// The deep faults are left out: each oracle switched off would cost a deep fault's whole budget.
TEST(Cli, MutantsAblationShowsEveryOracleNecessary) {
  const std::map<std::string, std::string> only_caught_by{
      {"I1", "tensor-attr-changed-in-place"},   {"I2", "placed-copies-kept"},
      {"I3", "uninitialised-padding"},          {"I4", "grad-shard-overallocated"},
      {"I5", "accept-repeated-initialize"},     {"I6", "consolidated-from-rank0-shard"},
      {"I7", "refuse-gradient-accumulation"},   {"I8", "extra-collective-per-step"},
      {"I9", "step-count-skipped-on-one-rank"}, {"I10", "norm-squared-without-contiguous-gradients"},
      {"I11", "overflow-norm-reported-as-sentinel"}};
  std::string faults;
  for (const auto& [invariant, fault] : only_caught_by) faults += (faults.empty() ? "" : ",") + fault;
  const std::string out = temp_dir("ablate");
  // At most 400 cases a cell (each fault here falls within 54 with its oracle on): the survivors
  // are then the same on any machine, and a survivor costs 400 cases, not 5 s.
  const CliRun run =
      run_cli("mutants --ablate --no-deep --json --cases 400 --time-per-fault 5 --faults " + faults + " --out " + out);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto json = nlohmann::json::parse(run.output);
  ASSERT_EQ(json["necessary_for"].size(), only_caught_by.size()) << "an oracle without a fault here: " << json.dump();
  // Contains, not equals: a fault caught slowly (tensor-attr-changed-in-place: 54 cases, 2.9 s) may
  // outlast another column's 5 s on a loaded machine, which adds a survivor but takes none away.
  for (const auto& [invariant, fault] : only_caught_by) {
    const auto& survivors = json["necessary_for"][invariant];
    EXPECT_NE(std::find(survivors.begin(), survivors.end(), fault), survivors.end()) << invariant << ": " << json.dump();
  }
  ASSERT_EQ(json["matrix"].size(), only_caught_by.size());
  for (const auto& row : json["matrix"])  // every cell says which oracle caught it, or that it survived
    for (const auto& [invariant, fault] : only_caught_by)
      EXPECT_TRUE(row[invariant].is_string() && row[invariant] != invariant) << row.dump();
  std::system(("rm -rf " + out).c_str());
}

// The deep faults too, each within 60 s (seed 1 kills each in 15 to 1,050 cases, under 6 s here).
TEST(Cli, MutantsKillsEveryFaultWithItsInvariant) {
  const std::string out = temp_dir("mutants");
  const CliRun run = run_cli("mutants --json --time-per-fault 20 --time-per-deep-fault 60 --out " + out);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto rows = nlohmann::json::parse(run.output);
  ASSERT_GE(rows.size(), 52u);  // 42 single faults (the four knob faults and fp16-clip-of-scaled-norm among them) and 10 deep ones when this was written
  int deep = 0;
  for (const auto& row : rows) deep += row["deep"].get<bool>();
  EXPECT_GE(deep, 8) << "the catalogue keeps at least 8 deep faults";
  for (const auto& row : rows) {
    // An fp16 fault where LibTorch has no CPU fp16 (1.13) is not runnable here: neither killed
    // nor a survivor (the Debian 13 lane kills it).
    if (row.contains("not_runnable")) {
      EXPECT_EQ(row["fault"].get<std::string>().rfind("fp16-", 0), 0u) << row.dump();
      EXPECT_TRUE(row["killed"].is_null()) << row.dump();
      continue;
    }
    EXPECT_EQ(row["killed"], true) << row.dump();
    EXPECT_EQ(row["invariant"], row["expected_invariant"]) << row.dump();
    for (const char* key : {"fault", "deep", "killed", "invariant", "cases_to_kill", "seconds_to_kill", "modules", "ops"})
      EXPECT_TRUE(row.contains(key)) << key;
    if (row["fault"] == "legacy-0.15.4") {
      EXPECT_LE(row["cases_to_kill"].get<int>(), 5);
      EXPECT_LE(row["modules"].get<int>(), 2);
      EXPECT_LE(row["ops"].get<int>(), 2);
    }
  }
  std::system(("rm -rf " + out).c_str());
}

// The dense twin's numbers after every operation (what twin_cross_check compares with the Python
// twin): a forward's losses by rank and every parameter as float32 bits; a usage error without
// --json or with the twin switched off.
TEST(Cli, ReplayTwinNumbersGivesLossesByRankAndParametersAfterEveryOperation) {
  const std::string file = std::string(ZEROCHECK_SOURCE_DIR) + "/harness/tests/scenarios/twin/mlp_sgd_world2.json";
  const CliRun run = run_cli("replay " + file + " --json --twin-numbers");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto twin = nlohmann::json::parse(run.output)["twin"];
  ASSERT_EQ(twin.size(), 14u);
  EXPECT_EQ(twin[1]["op"], "forward");
  EXPECT_EQ(twin[1]["losses"].size(), 2u);
  EXPECT_TRUE(twin[2]["losses"].empty());
  EXPECT_EQ(twin[3]["params"]["0.weight"].size(), 16u);  // features 4: a 4 x 4 weight
  EXPECT_NE(twin[3]["params"]["0.weight"], twin[0]["params"]["0.weight"]) << "the step moved it";
  EXPECT_EQ(run_cli("replay " + file + " --twin-numbers").exit_code, 2);
  // I11 reads the twin too (interpreter.h needs_dense_twin): with all four off there is none.
  EXPECT_EQ(run_cli("replay " + file + " --json --twin-numbers --disable I3,I6,I8,I11").exit_code, 2);
  EXPECT_EQ(run_cli("replay " + file + " --json --twin-numbers --disable I3,I6,I8").exit_code, 0);
}

TEST(Cli, ReplayOfAMalformedScenarioExitsTwoNamingThePath) {
  const CliRun run = run_cli(std::string("replay ") + ZEROCHECK_SOURCE_DIR +
                             "/harness/tests/scenarios/malformed/child_backwards.json");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("$.tree[2].children[0]"), std::string::npos) << run.output;
  EXPECT_EQ(run_cli("replay /nonexistent/scenario.json").exit_code, 2);
}

TEST(Cli, ExportCoversTheDictionaryAndBothRepeatedInitializes) {
  const std::string out = temp_dir("export");
  const CliRun run = run_cli("export --cases 3 --out " + out);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream in(out + "/manifest.json");
  const auto manifest = nlohmann::json::parse(in);
  const auto& coverage = manifest["coverage"];
  EXPECT_TRUE(coverage["names_on_modules_missing"].empty()) << coverage.dump();
  EXPECT_TRUE(coverage["names_on_parameters_missing"].empty()) << coverage.dump();
  EXPECT_GT(coverage["repeated_initialize_same_optimizer"].get<int>(), 0);
  EXPECT_GT(coverage["repeated_initialize_fresh_optimizer"].get<int>(), 0);
  bool seed = false;
  for (const auto& entry : manifest["scenarios"]) {
    seed |= entry["source"] == "seed";
    const CliRun replay = run_cli("replay " + out + "/" + entry["file"].get<std::string>() + " --json");
    EXPECT_EQ(replay.exit_code, 0) << entry["file"] << replay.output;  // exported scenarios hold here
  }
  EXPECT_TRUE(seed);
  std::system(("rm -rf " + out).c_str());
}

// A campaign draws in slices (`--first K --random-only`): draw k of a seed is the same file as a
// whole export's random-k, and nothing else is written.
TEST(Cli, ExportFromTheKthDrawWritesTheSameScenariosAsAWholeExport) {
  const std::string whole = temp_dir("export-whole"), slice = temp_dir("export-slice");
  ASSERT_EQ(run_cli("export --cases 5 --seed 9 --world 2 --out " + whole).exit_code, 0);
  const CliRun run = run_cli("export --first 3 --cases 2 --random-only --seed 9 --world 2 --out " + slice);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream in(slice + "/manifest.json");
  const auto manifest = nlohmann::json::parse(in);
  ASSERT_EQ(manifest["scenarios"].size(), 2u) << manifest.dump();
  for (const char* name : {"random-0003.json", "random-0004.json"}) {
    std::ifstream a(whole + "/scenarios/" + name), b(slice + "/scenarios/" + name);
    const std::string text_a((std::istreambuf_iterator<char>(a)), {}), text_b((std::istreambuf_iterator<char>(b)), {});
    EXPECT_FALSE(text_a.empty()) << name;
    EXPECT_EQ(text_a, text_b) << name;
  }
  std::system(("rm -rf " + whole + " " + slice).c_str());
}

// I10's share from the command line: the fault only I10 sees survives --inert-fraction 0 and is
// caught at 1, and the replay command carries the fraction, so the replay runs twice too.
TEST(Cli, InertFractionSetsWhichCasesRunTwiceAndTheReplayKeepsIt) {
  const std::string out = temp_dir("inert");
  const std::string check = "check --engine norm-squared-without-contiguous-gradients --cases 200 --seed 3 --out " + out;
  const CliRun off = run_cli(check + " --inert-fraction 0");
  EXPECT_EQ(off.exit_code, 0) << off.output;
  const CliRun all = run_cli(check + " --inert-fraction 1");
  ASSERT_EQ(all.exit_code, 1) << all.output;
  EXPECT_NE(all.output.find("I10 violated"), std::string::npos) << all.output;
  const auto at = all.output.find("zerocheck replay ");
  ASSERT_NE(at, std::string::npos) << all.output;
  const std::string replay = all.output.substr(at + 10, all.output.find('\n', at) - at - 10);
  EXPECT_NE(replay.find("--inert-fraction 1"), std::string::npos) << replay;
  EXPECT_EQ(run_cli(replay).exit_code, 1) << replay;
  EXPECT_EQ(run_cli("check --inert-fraction 2").exit_code, 2);
  std::system(("rm -rf " + out).c_str());
}

TEST(Cli, BadUsageExitsTwo) {
  EXPECT_EQ(run_cli("train --world 0").exit_code, 2);
  EXPECT_EQ(run_cli("train --model nonesuch").exit_code, 2);
  EXPECT_EQ(run_cli("train --engine nonesuch").exit_code, 2);
  EXPECT_EQ(run_cli("train --comm carrier-pigeon").exit_code, 2);
  EXPECT_EQ(run_cli("no-such-command").exit_code, 2);
  EXPECT_EQ(run_cli("").exit_code, 2);
}

// A rank of the engine under test that throws is a finding (exit 1) named by its rank, and it
// fails the run fast: the peers stop on the world's abort, not on the collective timeout (30 s by
// default, the bound here: the run takes about a second, a margin of more than ten times).
TEST(Cli, AThrowingRankFailsTheRunFastWithItsError) {
  for (const char* comm : {"local", "gloo"}) {
    const auto start = std::chrono::steady_clock::now();
    const CliRun run = run_cli(std::string("train --world 4 --steps 5 --fail-rank 2 --fail-step 1 --comm ") + comm);
    const auto elapsed = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(run.exit_code, 1) << comm << "\n" << run.output;
    EXPECT_NE(run.output.find("rank 2: injected failure"), std::string::npos) << run.output;
    EXPECT_LT(elapsed, std::chrono::seconds(30)) << comm << ": the peers waited for the collective timeout";
  }
}

// Exit 3 is zerocheck's own failure, never a finding: here the shrunk scenario of a real
// violation cannot be written (its folder's parent is a file). Exit 1 would tell CI the engine
// broke an invariant; the engine under test did, but the tool could not finish saying so.
TEST(Cli, AFailureOfTheHarnessItselfExitsThree) {
  const std::string file = temp_dir("not_a_folder");
  std::ofstream(file) << "a file, not a folder\n";
  const CliRun run = run_cli("check --engine legacy-0.15.4 --world 1 --cases 5 --out " + file + "/out");
  EXPECT_EQ(run.exit_code, 3) << run.output;
  EXPECT_NE(run.output.find("zerocheck itself failed"), std::string::npos) << run.output;
  std::remove(file.c_str());
}

TEST(Cli, TrainSavesAndResumesOnAnotherWorldAndTheCheckpointCommandsReadIt) {
  const std::string dir = temp_dir("ckpt"), out = dir + "_full.pt";
  const CliRun saved = run_cli("train --model moe-placed --world 3 --steps 2 --save " + dir);
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  // Resumed on 2 ranks: the dense twin replays the 3-rank steps first, and parity still holds.
  const CliRun resumed = run_cli("train --resume " + dir + " --world 2 --steps 2");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed after step 2 of a checkpoint saved by 3 ranks"), std::string::npos)
      << resumed.output;
  const CliRun inspect = run_cli("checkpoint inspect " + dir);
  EXPECT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_NE(inspect.output.find("2.experts.3.linear.weight"), std::string::npos) << inspect.output;
  EXPECT_NE(inspect.output.find("verification: ok"), std::string::npos) << inspect.output;
  const CliRun exported = run_cli("checkpoint export " + dir + " --out " + out);
  EXPECT_EQ(exported.exit_code, 0) << exported.output;
  // Python's torch.load reads the export with the model's own names, where python3-torch exists
  // (weights_only=False: torch 2.6 loads only plain tensors by default, and LibTorch's pickler
  // tags the dict's types; torch 1.13 accepts the argument too).
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0) {
    const CliRun python{std::system(("/usr/bin/python3 -c \"import torch; d = torch.load('" + out +
                                     "', weights_only=False); assert list(d)[0] == '0.weight' and tuple(d['2.experts.3.linear.weight'].shape) "
                                     "== (8, 8), list(d)\"").c_str()),
                        ""};
    EXPECT_EQ(python.exit_code, 0);
  }
  {
    std::ofstream(dir + "/zero3_rank1_of3.pt", std::ios::app) << "x";
  }
  const CliRun damaged = run_cli("checkpoint inspect " + dir);
  EXPECT_EQ(damaged.exit_code, 1) << damaged.output;
  EXPECT_NE(damaged.output.find("zero3_rank1_of3.pt"), std::string::npos) << damaged.output;
  EXPECT_EQ(run_cli("train --resume " + dir + " --world 2 --steps 1").exit_code, 2);
  EXPECT_EQ(run_cli("checkpoint export " + dir + " --out " + out).exit_code, 2);
  EXPECT_EQ(run_cli("checkpoint inspect " + dir + "_none").exit_code, 2);
  std::system(("rm -rf " + dir + " " + out).c_str());
}

// What every build refuses with exit 2 naming the option, before any worker starts: NCCL
// without process ranks (on a build without CUDA: that it has none), NCCL with experts on the
// CPU. `zerocheck worker --help` documents both options.
TEST(Cli, BackendAndDeviceMistakesExitTwoNamingTheOption) {
  const CliRun threads = run_cli("check --backend nccl --cases 1");
  EXPECT_EQ(threads.exit_code, 2) << threads.output;
  EXPECT_NE(threads.output.find("--backend"), std::string::npos) << threads.output;
  const CliRun contradiction = run_cli("check --procs 2 --backend nccl --device cpu --cases 1");
  EXPECT_EQ(contradiction.exit_code, 2) << contradiction.output;
  EXPECT_NE(contradiction.output.find("--backend nccl"), std::string::npos) << contradiction.output;
  const CliRun help = run_cli("worker --help");
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_NE(help.output.find("--backend"), std::string::npos) << help.output;
  EXPECT_NE(help.output.find("--device"), std::string::npos) << help.output;
}

}  // namespace
