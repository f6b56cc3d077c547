"""The collectives the checks make, on a process group of their own, each with a timeout.

The checks read DeepSpeed's state with plain torch.distributed, never through DeepSpeed's own
gather: one small object exchange per operation (what each rank holds: I9) and at most one flat
all_gather of the ranks' shards (I3, I4). They run on a Gloo group created for them, so they can
never be matched with a collective DeepSpeed has in flight on its own group, and every call
times out (`timeout` seconds) instead of waiting forever for a rank that is stuck elsewhere.

Requires: every rank creates the Exchange at the same point (the group is a collective) and then
makes the same calls in the same order.
"""

import datetime


class ExchangeError(Exception):
    """A collective of the checks failed or timed out; the message says which."""


class Exchange:
    def __init__(self, rank, world_size, timeout=60.0):
        self.rank = rank
        self.world_size = world_size
        self.timeout = timeout
        self._group = None
        if world_size > 1:
            import torch.distributed as dist

            self._group = dist.new_group(backend="gloo",
                                         timeout=datetime.timedelta(seconds=timeout))

    def objects(self, obj):
        """Every rank's `obj` (picklable), in rank order."""
        if self._group is None:
            return [obj]
        import torch.distributed as dist

        gathered = [None] * self.world_size
        try:
            dist.all_gather_object(gathered, obj, group=self._group)
        except Exception as e:  # noqa: BLE001 - Gloo's timeout is a RuntimeError
            raise ExchangeError(f"the checks' object exchange failed: {type(e).__name__}: {e}") from e
        return gathered

    def flat(self, tensor):
        """Every rank's 1-D float32 `tensor` (all of the same size), in rank order."""
        import torch

        if self._group is None:
            return [tensor]
        if tensor.numel() == 0:  # torch 1.13's Gloo divides by the element count
            return [tensor.clone() for _ in range(self.world_size)]
        import torch.distributed as dist

        out = [torch.empty_like(tensor) for _ in range(self.world_size)]
        try:
            dist.all_gather(out, tensor.contiguous(), group=self._group)
        except Exception as e:  # noqa: BLE001
            raise ExchangeError(f"the checks' all_gather of {tensor.numel()} elements failed: "
                                f"{type(e).__name__}: {e}") from e
        return out
