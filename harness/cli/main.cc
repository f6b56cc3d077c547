// zerocheck: the command-line front of the harness. Subcommands come from ZEROCHECK_COMMANDS.
#include "harness/cli/command.h"
#include "harness/cli/process_args.h"

#include "engine/errors.h"
#include "harness/world/process_world.h"
#include "harness/world/world.h"

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

namespace {

using namespace zerocheck::cli;

// Parses and runs one command line; returns its exit code.
int run_command_line(std::vector<std::string> args) {
  CLI::App app{"zerocheck: a ZeRO-3 engine on LibTorch and the harness that keeps it honest"};
  app.require_subcommand(1);
  int exit_code = kExitOk;
#define ZEROCHECK_ADD_COMMAND(name, registrar, doc) registrar(*app.add_subcommand(#name, doc), exit_code);
  ZEROCHECK_COMMANDS(ZEROCHECK_ADD_COMMAND)
#undef ZEROCHECK_ADD_COMMAND
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  } catch (const zero3::UsageError& e) {
    std::cerr << "zerocheck: " << e.what() << "\n";
    return kExitUsage;
  } catch (const zero3::ConfigError& e) {
    std::cerr << "zerocheck: " << e.what() << "\n";
    return kExitUsage;
  } catch (const zero3::CheckpointError& e) {  // a checkpoint given as input that does not verify
    std::cerr << "zerocheck: " << e.what() << "\n";
    return kExitUsage;
  } catch (const zerocheck::RankLost& e) {  // a worker of the engine under test died or hung
    std::cerr << "zerocheck: " << e.what() << "\n";
    return kExitViolation;
  } catch (const zerocheck::RankFailure& e) {
    std::cerr << "zerocheck: " << e.what() << "\n";
    return kExitViolation;
  } catch (const std::exception& e) {
    std::cerr << "zerocheck: internal error (exit 3: zerocheck itself failed, not the engine under test): "
              << e.what() << "\n";
    return kExitHarness;
  }
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  // `zerocheck worker [options] -- COMMAND ...` under torchrun: rank 0 joins as the coordinator
  // and runs COMMAND on the world; the other ranks serve its jobs (see worker_command.cc).
  const auto dash = std::find(args.begin(), args.end(), "--");
  if (args.size() > 1 && args[1] == "worker" && dash != args.end()) {
    std::vector<std::string> command{args[0]};
    command.insert(command.end(), dash + 1, args.end());
    set_worker_coordinates(true);
    const int code = run_command_line(std::vector<std::string>(args.begin(), dash));
    if (code != kExitOk || !has_coordinated_pool()) return code;
    const int result = run_command_line(command);
    set_coordinated_pool(nullptr);  // tells the serving ranks to exit
    return result;
  }
  return run_command_line(args);
}
