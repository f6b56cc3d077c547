"""bf16 collectives on torch 1.13's Gloo, which refuses them ("Invalid scalar type"), so that
DeepSpeed v0.14.5 can run bf16 on Debian 12 at all (docs/deepspeed-precision.md, "How the runs
were made").

Each of broadcast, all_reduce and all_gather given a bf16 tensor sends an fp32 copy and rounds
the result back once. Broadcast and gather move values, and widening a bf16 value is exact; a
SUM of two ranks is their fp32 sum rounded once, which is what torch 2.6's Gloo computes for
bf16 (measured, gloo_bf16_sum_probe.py), so the numbers are those of a Gloo with bf16 at world 1
and 2. At world >= 3 torch 2.6's Gloo rounds after each addition; this rounds once (the twin does
not follow bf16 there: twin.precision_not_followed). The collective runs synchronously (an
async caller gets a completed handle), so a bf16 gather here has no Gloo race. Other dtypes go
to the original functions untouched, and torch >= 2 is left alone.
"""

import functools
import inspect

_installed = False


class _Done:
    """A completed async Work handle."""

    def wait(self, *args, **kwargs):
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True


def needed(torch):
    return int(torch.__version__.split(".")[0]) < 2


def install():
    """Wraps torch.distributed's broadcast, all_reduce and all_gather (idempotent; torch < 2)."""
    global _installed
    import torch
    import torch.distributed as dist

    if _installed or not needed(torch):
        return
    _installed = True
    bf16 = torch.bfloat16

    def widened(original, first):
        """`original` on fp32 copies of its tensor arguments when one is bf16; `first`: the name
        of its tensor argument (all_gather: "tensor_list", then "tensor")."""
        signature = inspect.signature(original)

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            names = [first] + (["tensor"] if first == "tensor_list" else [])
            tensors = [t for name in names for t in
                       (bound.arguments[name] if name == "tensor_list" else [bound.arguments[name]])]
            if not any(t.dtype == bf16 for t in tensors):
                return original(*args, **kwargs)
            copies = [t.float() for t in tensors]
            async_op = bound.arguments.get("async_op", False)
            bound.arguments["async_op"] = False
            if first == "tensor_list":
                bound.arguments["tensor_list"], bound.arguments["tensor"] = copies[:-1], copies[-1]
            else:
                bound.arguments[first] = copies[0]
            original(*bound.args, **bound.kwargs)
            for t, c in zip(tensors, copies):
                t.copy_(c)  # rounds to nearest even once
            return _Done() if async_op else None
        return wrapper

    dist.broadcast = widened(dist.broadcast, "tensor")
    dist.all_reduce = widened(dist.all_reduce, "tensor")
    dist.all_gather = widened(dist.all_gather, "tensor_list")
