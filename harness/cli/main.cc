// zerocheck: the command-line front of the harness. Subcommands come from ZEROCHECK_COMMANDS.
#include "harness/cli/command.h"

#include "engine/errors.h"

#include <iostream>

int main(int argc, char** argv) {
  using namespace zerocheck::cli;
  CLI::App app{"zerocheck: a ZeRO-3 engine on LibTorch and the harness that keeps it honest"};
  app.require_subcommand(1);
  int exit_code = kExitOk;
#define ZEROCHECK_ADD_COMMAND(name, registrar, doc) registrar(*app.add_subcommand(#name, doc), exit_code);
  ZEROCHECK_COMMANDS(ZEROCHECK_ADD_COMMAND)
#undef ZEROCHECK_ADD_COMMAND
  try {
    app.parse(argc, argv);
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
  } catch (const std::exception& e) {
    std::cerr << "zerocheck: error: " << e.what() << "\n";
    return kExitViolation;
  }
  return exit_code;
}
