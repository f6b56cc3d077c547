#!/usr/bin/env python3
"""DeepSpeed ZeRO-3 steps a parameter with a gradient from an earlier step.

Two experts, one used per step (as an MoE layer routes): step 1 uses expert A, step 2 only B.
A correct engine leaves A alone in step 2 (plain SGD, no momentum: no gradient, no move; ZeRO's
own zero gradient gives the same). ZeRO-3 moves A again by -lr * (A's step-1 gradient): its
gradient partition buffer (`__param_id_to_grad_partition`, one flat buffer allocated zeroed)
is overwritten only for parameters that get a gradient (`partition_grads`, `micro_step_id == 0`)
and never cleared after a step, and `independent_gradient_partition_epilogue` hands every
trainable parameter's buffer to the optimizer.

Run on one rank (or on W ranks with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set):
    DS_ACCELERATOR=cpu python3 zero3_stale_gradient.py
Prints REPRODUCED and exits 1 when A moved in step 2, NOT REPRODUCED and exits 0 otherwise.
With --plain the same steps run on plain PyTorch (no DeepSpeed) and must not reproduce.
Found by zerocheck's upstream suite (I3: an expert's parameters differ from the dense twin after
the step that did not route to it); see REPORT.md beside this script.
"""

import os
import socket
import sys

import torch

for name, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"),
                    ("MASTER_ADDR", "127.0.0.1")):
    os.environ.setdefault(name, value)
if "MASTER_PORT" not in os.environ:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(s.getsockname()[1])

PLAIN = "--plain" in sys.argv  # the same steps on plain PyTorch: the control
if not PLAIN:
    import deepspeed  # noqa: E402


class TwoExperts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)

    def forward(self, x, use_a):
        return self.a(x) if use_a else self.b(x)


torch.manual_seed(0)
model = TwoExperts()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # no momentum: no gradient, no move
config = {"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0.0,
          "zero_allow_untested_optimizer": True,
          # Persistent parameters: the step's changing route needs no re-fetch.
          "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 100000}}
if PLAIN:
    engine = model
else:
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
rank = int(os.environ["RANK"])
x = torch.full((2, 4), 0.5 + rank)


def expert_a():
    if PLAIN:
        return model.a.weight.detach().clone()
    return model.a.weight.ds_tensor.detach().clone()  # this rank's shard of A's weight


for step, use_a in ((1, True), (2, False)):
    loss = engine(x, use_a).pow(2).mean()
    if PLAIN:
        loss.backward()
    else:
        engine.backward(loss)
    before = expert_a()
    if PLAIN:  # the engine's step zeroes the gradients after stepping, as here
        optimizer.step()
        optimizer.zero_grad()
    else:
        engine.step()
    moved = (expert_a() - before).abs().max().item()
    print(f"[rank {rank}] step {step} ({'A' if use_a else 'B'} used): expert A moved by {moved:.3g}",
          flush=True)

if moved > 0:
    print("REPRODUCED ZeRO-3 stepped expert A with its step-1 gradient in step 2, which did not use it")
    sys.exit(1)
print("NOT REPRODUCED expert A did not move in step 2")
