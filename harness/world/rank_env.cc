#include "harness/world/rank_env.h"

#include "engine/errors.h"

#include <cstdlib>
#include <string>

namespace zerocheck {
namespace {

std::string required(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0')
    throw zero3::UsageError(std::string("zerocheck worker: environment variable ") + name +
                            " is not set (run under torchrun, or use --procs)");
  return value;
}

int integer(const char* name, const std::string& text, int low, int high) {
  try {
    size_t used = 0;
    const long value = std::stol(text, &used);
    if (used == text.size() && value >= low && value <= high) return static_cast<int>(value);
  } catch (const std::exception&) {
  }
  throw zero3::UsageError(std::string("zerocheck worker: ") + name + "='" + text + "' is not an integer in [" +
                          std::to_string(low) + ", " + std::to_string(high) + "]");
}

}  // namespace

RankEnv RankEnv::from_environment() {
  RankEnv env;
  env.world_size = integer("WORLD_SIZE", required("WORLD_SIZE"), 1, 4096);
  env.rank = integer("RANK", required("RANK"), 0, env.world_size - 1);
  const char* local = std::getenv("LOCAL_RANK");
  env.local_rank = local ? integer("LOCAL_RANK", local, 0, 4095) : env.rank;
  env.master_addr = required("MASTER_ADDR");
  env.master_port = integer("MASTER_PORT", required("MASTER_PORT"), 1, 65535);
  if (const char* pid = std::getenv("ZEROCHECK_LAUNCHER_PID")) env.launcher_pid = integer("ZEROCHECK_LAUNCHER_PID", pid, 1, 1 << 30);
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  env.store_hosted_elsewhere = env.launcher_pid != 0 || (agent != nullptr && std::string(agent) == "True");
  return env;
}

}  // namespace zerocheck
