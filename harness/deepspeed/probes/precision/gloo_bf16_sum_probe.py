"""How Gloo sums bf16 at world 2: is all_reduce / reduce_scatter_tensor of two bf16 tensors the
fp32 sum of the two, rounded once to bf16 (round to nearest even)?

That is the rule a dense twin must follow to equal ZeRO-3's bf16 reduce-scatter bit for bit at
world 2 (each rank's gradient divided by 2 in bf16, then summed by the collective). Each of the two
ranks draws 200000 bf16 values over a wide range of exponents and signs (seeded by rank), both ranks
sum them with Gloo, and rank 0 compares the result with (a.float() + b.float()).bfloat16().
Torch only; no DeepSpeed.

    /usr/bin/python3 harness/deepspeed/probes/precision/gloo_bf16_sum_probe.py

Measured:
  torch 2.6 (Debian 13): all_reduce and reduce_scatter_tensor both equal the fp32-sum-rounded-once
    rule on every element (0 of 200000 differ).
  torch 1.13 (Debian 12): all_reduce of a bf16 tensor raises "RuntimeError: Invalid scalar type"
    (Gloo has no bf16 there), and reduce_scatter_tensor raises "ProcessGroup gloo does not support
    _reduce_scatter_base" (whatever the dtype: the shared CPU shims emulate it with all_reduce).
"""
import os
import socket
import subprocess
import sys

N = 200000


def draw(rank):
    import torch
    g = torch.Generator().manual_seed(1234 + rank)
    mantissa = torch.rand(N, generator=g) * 2 - 1
    exponent = torch.randint(-40, 40, (N,), generator=g).float()
    return (mantissa * torch.pow(2.0, exponent)).bfloat16()


def rank_main(rank):
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    mine = draw(rank)
    expected = (draw(0).float() + draw(1).float()).bfloat16()
    report = {}
    summed = mine.clone()
    try:
        dist.all_reduce(summed)
        report["all_reduce"] = int((summed.view(torch.int16) != expected.view(torch.int16)).sum())
    except Exception as e:  # torch 1.13: Gloo has no bf16
        report["all_reduce"] = f"{type(e).__name__}: {e}"
    if hasattr(dist, "reduce_scatter_tensor"):
        out = torch.empty(N // 2, dtype=torch.bfloat16)
        try:
            dist.reduce_scatter_tensor(out, mine.clone())
            part = expected[rank * (N // 2):(rank + 1) * (N // 2)]
            report["reduce_scatter_tensor"] = int((out.view(torch.int16) != part.view(torch.int16)).sum())
        except Exception as e:
            report["reduce_scatter_tensor"] = f"{type(e).__name__}: {e}"
    else:
        report["reduce_scatter_tensor"] = "absent in this torch"
    print(f"rank {rank} torch {torch.__version__}: elements differing from fp32-sum-rounded-once "
          f"(of {N}): {report}", flush=True)
    dist.destroy_process_group()


def main():
    if "RANK" in os.environ:
        return rank_main(int(os.environ["RANK"]))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__)],
                              env=dict(os.environ, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                       MASTER_PORT=str(port), USE_LIBUV="0"))
             for r in range(2)]
    sys.exit(max(p.wait(timeout=300) for p in procs))


if __name__ == "__main__":
    main()
