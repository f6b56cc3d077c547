#include "engine/coalesced_gather.h"

#include <ATen/ATen.h>

namespace zero3 {

std::vector<at::Tensor> all_gather_coalesced(Comm& comm, const std::vector<at::Tensor>& shards) {
  std::vector<at::Tensor> full;
  if (shards.empty()) return full;
  const int64_t world = comm.world_size();
  if (shards.size() == 1) {  // its own buffer, as DeepSpeed's single-parameter path
    full.push_back(at::empty({shards[0].numel() * world}, shards[0].options()));
    comm.all_gather(shards[0], full[0]);
    return full;
  }
  // Rank r's slot of the flat buffer is its shards side by side (DeepSpeed's torch.cat into
  // partitions[rank_in_group]); row r of its [N, sum c_i] view is what rank r sent.
  std::vector<at::Tensor> flat_shards;
  int64_t slot = 0;
  for (const at::Tensor& s : shards) {
    flat_shards.push_back(s.reshape({-1}));
    slot += s.numel();
  }
  at::Tensor mine = at::cat(flat_shards);
  at::Tensor flat = at::empty({slot * world}, mine.options());
  comm.all_gather(mine, flat);
  at::Tensor rows = flat.view({world, slot});
  int64_t offset = 0;
  for (const at::Tensor& s : shards) {
    const int64_t c = s.numel();
    at::Tensor own = at::empty({c * world}, mine.options());
    own.view({world, c}).copy_(rows.narrow(1, offset, c));
    full.push_back(own);
    offset += c;
  }
  return full;
}

}  // namespace zero3
