// RankEnv: who this process is in a world of processes, read from the environment torchrun
// (and `zerocheck --procs`) sets: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.
#pragma once

#include <string>

namespace zerocheck {

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Who hosts the store at MASTER_ADDR:MASTER_PORT: zerocheck's launcher
  // (ZEROCHECK_LAUNCHER_PID set), torchrun's agent (TORCHELASTIC_USE_AGENT_STORE=True), or else
  // rank 0, as `torch.distributed`'s env:// does.
  bool store_hosted_elsewhere = false;
  int launcher_pid = 0;  // 0: not started by zerocheck's launcher

  // Returns the environment's values. Throws zero3::UsageError naming the variable that is
  // missing or malformed, or a rank outside [0, WORLD_SIZE).
  static RankEnv from_environment();
};

}  // namespace zerocheck
