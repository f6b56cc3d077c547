#include "harness/interpreter/profile_options.h"

namespace zerocheck {

RunOptions profile_run_options(DrawProfile profile, zero3::Fault fault) {
  RunOptions options(fault);  // comm: LocalComm ranks, the default
  if (profile == DrawProfile::attributes) {
    options.disabled_oracles = {"I3", "I4", "I6", "I8"};
    options.world.ranks = RankKind::fibers;
  }
  return options;
}

}  // namespace zerocheck
