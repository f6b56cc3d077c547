"""I10's record of one replay on one rank: after the build and every operation, a digest of each
thing a knob that promises not to change the numbers must not change (oracles/inert_knobs.py
compares two replays' records).

Per entry: "errors" (the failures this operation reported: invariant, exception type), "loss"
(the pending loss's bits), "parameters" (every live engine's parameters as its checkpoint state
holds them: shard values and fp32 masters), "optimizer" (every other optimizer state field),
"steps" (the engine's step counters and the optimizer's step fields). Each is read per parameter
(Adapter.checkpoint_state) and without a shard's padding (uninitialised upstream), so a state
cut into other sub-groups digests the same when its elements are the same. A digest is the first 16 hex digits of SHA-256 over names, dtypes, shapes
and bytes.
"""

import hashlib

import torch

_PARAMETER_FIELDS = ("value", "master")
_STEP_FIELDS = ("step",)
_ENGINE_COUNTERS = ("global_steps", "micro_steps")


def _update(h, key, value):
    h.update(repr(key).encode("utf-8"))
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode("utf-8"))
        # float64 holds every fp32, fp16 and bf16 value exactly: the bits, whatever numpy knows.
        as_bytes = t if t.dtype in (torch.float32, torch.float64, torch.int64) else t.double()
        h.update(as_bytes.numpy().tobytes())
    else:
        h.update(repr(value).encode("utf-8"))


def _digest(items):
    h = hashlib.sha256()
    for key, value in items:
        _update(h, key, value)
    return h.hexdigest()[:16]


def _real_elements(tensor, whole, rank):
    """This rank's piece of a partitioned value without its padding (DeepSpeed allocates the
    padding uninitialised: its bytes differ from run to run); a tensor held whole as it is."""
    if whole is None or not isinstance(tensor, torch.Tensor):
        return tensor
    flat = tensor.reshape(-1)
    start = rank * flat.numel()
    return flat[:max(0, min(flat.numel(), whole - start))]


class Trace:
    """The entries of one replay, in order: [{"op_index", "op", field: digest}]."""

    def __init__(self):
        self.entries = []
        self._findings_seen = 0

    def record(self, replay, label):
        """Appends the entry after the build or operation `label` (checks.check has run)."""
        entry = {"op_index": replay.index, "op": label}
        new = replay.result.findings[self._findings_seen:]
        self._findings_seen = len(replay.result.findings)
        entry["errors"] = _digest(
            ((f.invariant, f.attribute), (f.exception or "").split(":", 1)[0])
            for f in new if f.invariant == "op")
        loss = replay.loss
        entry["loss"] = _digest([("loss", loss)]) if isinstance(loss, torch.Tensor) else None
        parameters, optimizer, steps = [], [], []
        for i, live in enumerate(replay.live):
            engine = live.engine
            counters = [(n, getattr(engine, n)) for n in _ENGINE_COUNTERS
                        if isinstance(getattr(engine, n, None), int)]
            steps.append(((i, "engine"), counters))
            try:
                state = replay.adapter.checkpoint_state(engine)
            except Exception as e:  # noqa: BLE001 - unreadable state is recorded, never raised
                parameters.append(((i, "unavailable"), type(e).__name__))
                entry["unreadable"] = f"{type(e).__name__}: {e}"  # I10 does not judge it
                continue
            for (name, field), (tensor, whole) in sorted(state.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
                into = (parameters if field in _PARAMETER_FIELDS
                        else steps if field in _STEP_FIELDS else optimizer)
                into.append(((i, name, field), _real_elements(tensor, whole, replay.rank)))
        entry["parameters"] = _digest(parameters)
        entry["optimizer"] = _digest(optimizer)
        entry["steps"] = _digest(steps)
        self.entries.append(entry)
