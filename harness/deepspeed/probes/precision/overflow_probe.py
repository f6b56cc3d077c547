"""What DeepSpeed does with a non-finite gradient: one rank's gradient gets an infinity at one step.

Trains a tiny model (two elementwise-scaled parameters of 6 and 5 elements, so world 2 pads one of
them; no matmul, because torch 1.13 has no fp16 matmul on CPU) for a few steps with torch.optim.SGD,
and before the chosen step a tensor hook on the first parameter of the chosen rank writes +inf into
its gradient's first element. After every step each rank prints one JSON line: DeepSpeed's overflow
flag, skipped_steps, global_steps, the reported global gradient norm, the loss scale, whether the
(gathered) 16-bit weights changed and are finite, p1[0]'s update, whether the fp32 master partition
is finite, and ZeRO-3's accumulated gradient buffer before the step (its dtype, whether all its values
are bf16 values). It reads engine state and the ZeRO optimizer's fp32 partition and gradient buffer;
it changes no DeepSpeed code.

From the project root (master: the same inside the Debian 13 lane, with its tree):

    /usr/bin/python3 harness/deepspeed/probes/precision/overflow_probe.py \
        --deepspeed-tree ../shared/deepspeed/v0.14.5 --stage 3 --dtype bf16 --world 1

The launcher stages the tree with the suite's own rule (zerocheck_ds.engines.deepspeed_tree: a
copy with DeepSpeed's package links restored, the shims beside it on PYTHONPATH, the copy as the
working directory), then starts one rank process of this script per rank on a free loopback port
(no torchrun: Debian 12's crashes) and prints their JSON lines in rank order.

Defaults: steps 0..2, +inf written at step 1 on rank 0 (--bad-rank 1 for world 2), SGD lr 0.125,
the version's own gradient_clipping, every parameter partitioned (persistence threshold 0), and
--fp16-args keeping fp16's scale at 16 so that no step overflows by itself. v0.14.5 needs
--bf16-gloo-upcast for bf16 (else initialize dies in _broadcast_model: "RuntimeError: Invalid scalar
type", measured at world 1 and 2) and both versions --allow-cpu-fp16 for fp16. Measured, step 1 (the
injected step) of each run:

v0.14.5, torch 1.13:
  stages 1, 2, 3 bf16, world 1 (stage 3 also world 2): overflow false, skipped_steps 0, grad_norm
    "nan", the inf in the fp32 master and the weights (and still there after step 2).
  stages 1, 2, 3 fp16, world 1 (stage 3 also world 2, inf on rank 1): overflow true on every rank,
    skipped_steps 1, global_steps 2, grad_norm = step 0's (stale), weights unchanged, scale 16 -> 8.
  stage 2 bf16, world 2 (inf on rank 1): as above on both ranks; the inf in rank 0's master only
    (rank 0 owns the element), in both ranks' weights.
  stage 3 fp16, '{"initial_scale_power": 4, "hysteresis": 1, "min_loss_scale": 16}': the inf at step 1
    raises "Exception: Current loss scale already at minimum - cannot decrease scale anymore.
    Exiting run." (master too).
  stage 3 fp16, --fp16-args '{}' and no inf: scale 4294967296 at the start, halved at every step
    (every step overflows); '{"hysteresis": 2}' starts at 65536 and keeps it at the first overflow.
  stages 2 and 3 fp16, loss_scale_window 2, no inf: the scale doubles at step 1, and p1[0]'s update
    that step is -0.125 where the gradient says -0.25 (divided by the doubled scale).
  stage 3 bf16, world 1, defaults: the gradient buffer is bfloat16 (accumulation in bf16).
  stage 3 bf16, world 2, --comm-dtype fp32 --accum-dtype fp32, no inf: every value of the fp32
    gradient buffer is a bf16 value at every step (the reduced fp32 gradient was rounded to bf16).
master edaa722, torch 2.6 (gradient_clipping defaults to 1.0 there):
  stages 1 and 2 bf16, world 1 (stage 2 also world 2): skipped (check_grad_overflow defaults to
    true), skipped_steps 1, stale grad_norm; with --bf16-args '{"check_grad_overflow": false}':
    not skipped, grad_norm 1.0, the inf in master and weights.
  stage 3 bf16, world 1 and 2 (also --clip 0): overflow false, skipped_steps 0, grad_norm 1.0, the
    inf in master and weights.
  stages 1, 2, 3 fp16, world 1 (stage 3 also world 2): skipped on every rank, skipped_steps 1,
    stale grad_norm, scale 16 -> 8.
  stage 3 fp16, --fp16-args '{}' and no inf: 65536 kept at the first overflow (hysteresis 2), then
    halved at each. Stages 2 and 3 fp16, loss_scale_window 2 and --clip 0: doubles at step 2, and
    that step's update is -0.1875 where the gradient says -0.375. Without --allow-cpu-fp16,
    initialize raises "Type fp16 is not supported on your device."
  stage 3 bf16, world 2, --comm-dtype fp32 --accum-dtype fp32 --clip 0, no inf: the fp32 gradient
    buffer holds values that are not bf16 values (no rounding on the way), at every step.
  world 2: the gathered weights differed between the ranks in some runs (once -3.3e29 on rank 0 at
    a clean step 0): the Gloo all_gather race the suite already triages, not this probe's subject.
"""
import argparse
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile


def parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stage", type=int, default=3, choices=(1, 2, 3))
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    ap.add_argument("--deepspeed-tree", help="DeepSpeed source tree (launcher only)")
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--bad-step", type=int, default=1, help="step whose gradient gets the inf (-1: none)")
    ap.add_argument("--bad-rank", type=int, default=0)
    ap.add_argument("--clip", type=float, default=None, help="gradient_clipping (absent: the version's default)")
    ap.add_argument("--fp16-args", default='{"initial_scale_power": 4, "hysteresis": 1, "loss_scale_window": 1000}',
                    help="JSON merged into the fp16 section ('{}': the version's defaults)")
    ap.add_argument("--bf16-args", default="{}", help="JSON merged into the bf16 section")
    ap.add_argument("--comm-dtype", choices=("fp32", "bf16", "fp16"), help="communication_data_type")
    ap.add_argument("--accum-dtype", choices=("fp32", "bf16", "fp16"), help="data_types.grad_accum_dtype")
    ap.add_argument("--allow-cpu-fp16", action="store_true",
                    help="v0.14.5: tell DeepSpeed's CPU accelerator that fp16 is supported")
    ap.add_argument("--bf16-gloo-upcast", action="store_true",
                    help="torch 1.13: run Gloo's broadcast/all_reduce/all_gather of bf16 tensors in fp32 "
                         "(exact at world 1 and for broadcast/all_gather at any world; an all_reduce of "
                         "bf16 through fp32 rounds once, not per addition)")
    return ap.parse_args()


def launch(args):
    """Stage the tree, start one process per rank and print their output; returns the worst exit code."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    from zerocheck_ds.engines import deepspeed_tree
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    work = tempfile.mkdtemp(prefix="overflow-probe-")
    staged = deepspeed_tree.stage(args.deepspeed_tree, os.path.join(work, "deepspeed-tree"))
    base = dict(os.environ, **deepspeed_tree.environment(staged, deepspeed_tree.default_shims(args.deepspeed_tree)))
    procs = []
    for rank in range(args.world):
        env = dict(base, RANK=str(rank), WORLD_SIZE=str(args.world), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + sys.argv[1:], env=env,
                                      cwd=staged, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    codes = []
    for rank, p in enumerate(procs):
        out, _ = p.communicate(timeout=600)
        codes.append(p.returncode)
        lines = out.splitlines()
        shown = [l for l in lines if l.startswith("{")] + (lines[-40:] if p.returncode else [])
        for line in shown:  # the JSON lines, and how a failed rank ended
            print(f"[rank {rank}] {line}")
        print(f"[rank {rank}] exit {p.returncode}")
    shutil.rmtree(work, ignore_errors=True)
    return max(codes)


def upcast_bf16_collectives():
    """torch 1.13's Gloo refuses bf16 ("Invalid scalar type"): send such tensors as fp32, copy back."""
    import torch
    import torch.distributed as tdist

    class Done:
        """A finished work handle: the wrapped collective ran synchronously."""

        def wait(self, *a, **k):
            return True

        def is_completed(self):
            return True

    def wrap(orig, tensor_args):
        def collective(*a, **k):
            a = list(a)
            pairs = []  # (bf16 original, fp32 stand-in)

            def up(t):
                if isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16:
                    f = t.float()
                    pairs.append((t, f))
                    return f
                if isinstance(t, list):
                    return [up(x) for x in t]
                return t
            for i in tensor_args:
                if i < len(a):
                    a[i] = up(a[i])
            for name in ("tensor", "tensor_list"):
                if name in k:
                    k[name] = up(k[name])
            async_op = k.pop("async_op", False)
            out = orig(*a, **k)
            for t, f in pairs:
                t.copy_(f)
            return Done() if async_op else out
        return collective
    tdist.broadcast = wrap(tdist.broadcast, (0,))
    tdist.all_reduce = wrap(tdist.all_reduce, (0,))
    tdist.all_gather = wrap(tdist.all_gather, (0, 1))


def allow_cpu_fp16():
    """v0.14.5's CPU accelerator says fp16 is unsupported (initialize raises); this probe's model
    needs no fp16 matmul, so let it through to see the fp16 code path."""
    from deepspeed.accelerator import get_accelerator
    accelerator = get_accelerator()
    accelerator.is_fp16_supported = lambda: True
    accelerator.supported_dtypes = lambda: [torch_dtype("float"), torch_dtype("bfloat16"), torch_dtype("half")]


def torch_dtype(name):
    import torch
    return getattr(torch, name)


def config(args):
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
           # threshold 0: every parameter partitioned (none kept whole), so a gather really gathers
           "zero_optimization": {"stage": args.stage, "stage3_param_persistence_threshold": 0}, "zero_allow_untested_optimizer": True,
           "steps_per_print": 1000}
    if args.dtype == "bf16":
        cfg["bf16"] = dict({"enabled": True}, **json.loads(args.bf16_args))
    else:
        cfg["fp16"] = dict({"enabled": True}, **json.loads(args.fp16_args))
    if args.clip is not None:
        cfg["gradient_clipping"] = args.clip
    if args.comm_dtype:
        cfg["communication_data_type"] = args.comm_dtype
    if args.accum_dtype:
        cfg["data_types"] = {"grad_accum_dtype": args.accum_dtype}
    return cfg


def rank_main(args):
    import torch
    import deepspeed

    class Scaled(torch.nn.Module):
        """loss = sum(x1 * p1) + sum(x2 * p2): each gradient is its input, elementwise only."""

        def __init__(self):
            super().__init__()
            self.p1 = torch.nn.Parameter(torch.linspace(0.5, 1.5, 6))
            self.p2 = torch.nn.Parameter(torch.linspace(-1.0, 1.0, 5))

        def forward(self, x1, x2):
            return (x1 * self.p1).float().sum() + (x2 * self.p2).float().sum()

    rank = int(os.environ.get("RANK", "0"))
    if args.bf16_gloo_upcast:
        upcast_bf16_collectives()
    if args.allow_cpu_fp16:
        allow_cpu_fp16()
    deepspeed.init_distributed(dist_backend="gloo")
    model = Scaled()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.125)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config(args))
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.half
    first = [p for p in engine.module.parameters()][0]
    armed = {"on": False}

    def inject(grad):
        if not armed["on"]:
            return grad
        grad = grad.clone()
        grad.view(-1)[0] = float("inf")
        return grad

    if rank == args.bad_rank:
        first.register_hook(inject)

    def weights():
        params = list(engine.module.parameters())
        if hasattr(params[0], "ds_id"):
            with deepspeed.zero.GatheredParameters(params):
                return [p.detach().float().clone() for p in params]
        return [p.detach().float().clone() for p in params]

    def master_finite():
        """Whether the fp32 master partition is finite, ZeRO-3's padding left out (DeepSpeed
        allocates it uninitialised, so it may hold anything)."""
        opt = engine.optimizer
        if hasattr(opt, "fp32_partitioned_groups_flat"):
            real = []
            for params, flat in zip(opt.fp16_groups, opt.fp32_partitioned_groups_flat):
                offset = 0
                for p in params:
                    n = p.partition_numel()
                    keep = max(0, min(p.ds_numel - rank * n, n))
                    real.append(flat.narrow(0, offset, keep))
                    offset += n
            return bool(all(torch.isfinite(t).all() for t in real))
        return bool(all(torch.isfinite(t).all() for t in opt.single_partition_of_fp32_groups))

    def number(x):
        if x is None:
            return None
        x = float(x)
        return x if math.isfinite(x) else repr(x)

    print(json.dumps({"rank": rank, "event": "start", "optimizer": type(engine.optimizer).__name__,
                      "gradient_clipping": engine.gradient_clipping(),
                      "loss_scale": number(getattr(engine.optimizer, "loss_scale", None))}), flush=True)
    for step in range(args.steps):
        before = weights()
        x1 = (torch.linspace(1.0, 2.0, 6) * (rank + 1) * (step + 1)).to(dtype)
        x2 = (torch.linspace(-2.0, 2.0, 5) * (rank + 1) * (step + 1)).to(dtype)
        armed["on"] = step == args.bad_step
        loss = engine(x1, x2)
        engine.backward(loss)
        # ZeRO-3's reduced, accumulated gradient partitions before the step: their dtype, and whether
        # every value is a bf16 value (a reduce rounded to bf16 on the way shows as true)
        buf = getattr(engine.optimizer, "grad_partitions_flat_buffer", None)
        buffer_seen = None if buf is None else {
            "dtype": str(buf.dtype).replace("torch.", ""),
            "all_bf16_values": bool((buf.float() == buf.float().bfloat16().float()).all())}
        engine.step()
        armed["on"] = False
        after = weights()
        print(json.dumps({
            "rank": rank, "step": step, "injected": step == args.bad_step and rank == args.bad_rank,
            "overflow": getattr(engine.optimizer, "overflow", None), "skipped_steps": engine.skipped_steps,
            "global_steps": engine.global_steps, "grad_norm": number(engine.get_global_grad_norm()),
            "loss_scale": number(getattr(engine.optimizer, "loss_scale", None)),
            "weights_changed": any(not torch.equal(a, b) for a, b in zip(before, after)),
            # p1[0]'s update; its gradient is x1[0] = (rank + 1) * (step + 1) summed over ranks / world
            "p1_0_update": number(after[0].view(-1)[0] - before[0].view(-1)[0]),
            "weights_finite": all(bool(torch.isfinite(a).all()) for a in after),
            "master_finite": master_finite(), "grad_buffer": buffer_seen}), flush=True)


def main():
    args = parse()
    if "RANK" not in os.environ:
        if not args.deepspeed_tree:
            sys.exit("overflow_probe: --deepspeed-tree is required (the launcher stages it)")
        sys.exit(launch(args))
    rank_main(args)


if __name__ == "__main__":
    main()
