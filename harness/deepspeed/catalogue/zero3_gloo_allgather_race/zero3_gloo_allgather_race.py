#!/usr/bin/env python3
"""DeepSpeed ZeRO-3 on Gloo (CPU) reads gathered parameters before the gather has finished.

`Init._allgather_params_coalesced` (partition_parameters.py, "blocking call") launches one async
all_gather per parameter and waits only for the last handle ("Wait ensures the operation is
enqueued, but not necessarily complete"), then points each parameter's data at its output
buffer. With NCCL the collectives complete in stream order; Gloo runs them on worker threads
and the last can finish first, and the CPU accelerator's `resolves_data_dependency()` is true,
so nothing waits for the others: a parameter can hold a half-gathered buffer (uninitialised
memory where another rank's part belongs). ZeRO-3 gathers its persistent parameters this way
after every optimizer step (stage3.py `_post_step`), among others.

Run on 2 ranks (one process each), e.g.
    for r in 0 1; do DS_ACCELERATOR=cpu RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 \\
        MASTER_PORT=29512 python3 zero3_gloo_allgather_race.py & done; wait
Prints REPRODUCED and exits 1 when some gathered parameter did not hold its full value when the
gather returned, NOT REPRODUCED and exits 0 otherwise. With --plain the same gathers run as
plain blocking torch.distributed.all_gather calls and must not reproduce. Upstream: fixed by PR
#8539 (it waits on every handle). Found by zerocheck's upstream suite (I9: two ranks' whole copies
of one persistent parameter differ right after a step); see REPORT.md beside this script.
"""

import os
import sys

import torch

PLAIN = "--plain" in sys.argv  # plain blocking all_gathers on Gloo: the control
if not PLAIN:
    import deepspeed

TRIALS, LAYERS = 300, 16


def plain_gathers(expected, rank):
    """The same gathers on plain torch.distributed: each rank's part of every parameter, one
    blocking all_gather, reassembled."""
    torch.distributed.init_process_group("gloo")
    world = torch.distributed.get_world_size()
    whole = torch.cat([e.flatten() for e in expected])
    part = whole.chunk(world)[rank].clone()
    late = 0
    for _ in range(TRIALS):
        parts = [torch.empty_like(c) for c in whole.chunk(world)]
        torch.distributed.all_gather(parts, part)
        late += not torch.equal(torch.cat(parts), whole)
    return late

torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(LAYERS)])
expected = [p.detach().clone() for p in model.parameters()]
rank = int(os.environ["RANK"])
if PLAIN:
    late = plain_gathers(expected, rank)
    print(f"[rank {rank}] {late} of {TRIALS} plain gathers returned early", flush=True)
    print("REPRODUCED" if late else "NOT REPRODUCED", flush=True)
    torch.distributed.barrier()  # both ranks done with the group before either leaves
    # Leaves without tearing the Gloo group down: at the interpreter's exit that aborted a rank
    # now and then ("terminate called without an active exception"), and destroy_process_group()
    # hung one rank in 1 of 40 runs (torch 2.6). The control is the gathers, not the teardown.
    os._exit(1 if late else 0)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
config = {"train_micro_batch_size_per_gpu": 1, "zero_allow_untested_optimizer": True,
          "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
params = list(model.parameters())
late = 0
for _ in range(TRIALS):
    params[0].all_gather(params)  # blocking, by its docstring
    if any(not torch.equal(p.data, e) for p, e in zip(params, expected)):
        late += 1
    torch.distributed.barrier()  # every gather has landed before the parameters are released
    params[0].partition(params)
print(f"[rank {rank}] {late} of {TRIALS} gathers returned before every parameter held its value",
      flush=True)
if late:
    print("REPRODUCED a blocking ZeRO-3 all_gather returned before the data had arrived")
    sys.exit(1)
print("NOT REPRODUCED")
