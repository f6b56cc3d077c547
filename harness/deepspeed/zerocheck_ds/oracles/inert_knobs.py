"""I10: the ZeRO knobs that promise not to change the numbers change none. Torch-free.

DeepSpeed's bucket sizes, prefetch, live-parameter and reuse limits, sub-groups and overlap trade
memory and speed; they must not change a bit of a training run. The suite replays a chosen
scenario a second time with those knobs drawn again (`redraw`) and compares, operation by
operation and rank by rank, digests of the losses, every parameter's shard and fp32 master,
every optimizer state field, the step counters and the errors raised (replay/trace.py records
them; `judge` compares). A load restores state, so a checkpoint round trip is judged by what it
restored; the checkpoint files themselves may be laid out by sub-group and are not compared.

Which knobs are inert is a table per DeepSpeed version, each row citing the code that makes the
promise (`PROMISES`), with the conditions under which it holds; a knob outside them is not
redrawn. The scenario is chosen at random per scenario (`chosen`: seeded by its name, a stated
fraction), so the suite's speed holds. A difference is confirmed by a third replay with the first
replay's knobs: when that one differs too, the scenario is not deterministic and I10 says "not
checked" with that reason rather than blame a knob.
"""

import hashlib
import random
from collections import namedtuple
from dataclasses import asdict

from ..findings.verdict import Finding
from ..scenario import schema

INVARIANT = schema.some("invariants", "I10")[0]
# What a trace entry holds per operation (replay/trace.py), in the order a difference is named.
FIELDS = ("errors", "loss", "parameters", "optimizer", "steps")

# A knob's promise: the stages and world sizes where it holds, the versions (a prefix of
# DeepSpeed's version string; "" every version), the code that makes it, and whether it holds only
# without gradient clipping.
Promise = namedtuple("Promise", "stages max_world versions code without_clipping",
                     defaults=(False,))

_ALL = ("",)
_REDUCE_ORDER = ("each element is reduced as the sum over ranks of g_r / W whatever bucket or "
                 "buffer holds it; a sum of two is exact in either order, a sum of three or more "
                 "is in the collective's order, which may follow the element's place in the buffer")
# v0.14.5 line numbers; master (edaa722) keeps the same code under other numbers.
PROMISES = schema.some("config_keys", {
    "reduce_bucket_size": Promise((3,), 2, _ALL,
        "runtime/zero/stage3.py:1222 flushes the bucket when the next gradient would overflow it, "
        "1270-1274 reduces the bucket: " + _REDUCE_ORDER),
    "contiguous_gradients": Promise((3,), 2, _ALL,
        "runtime/zero/stage3.py:1235 copies a gradient into the flat bucket (an exact copy_); "
        "1270: " + _REDUCE_ORDER),
    "reduce_scatter": Promise((3,), 2, _ALL,
        "runtime/zero/stage3.py:1270-1274 all-reduces the contiguous bucket "
        "(__avg_scatter_contiguous_grads, 1287) or reduce-scatters the gradients (1344); "
        + _REDUCE_ORDER),
    "overlap_comm": Promise((3,), 8, _ALL,
        "runtime/zero/stage3.py:228 picks a side stream for reductions; on the CPU accelerator "
        "Stream() is None and stream() a no-op context (accelerator/cpu_accelerator.py:111-116)"),
    "stage3_prefetch_bucket_size": Promise((3,), 8, _ALL,
        "runtime/zero/partitioned_param_coordinator.py:354-356: how many elements are gathered "
        "ahead; a gather copies the shards' bits"),
    "stage3_max_live_parameters": Promise((3,), 8, _ALL,
        "runtime/zero/partitioned_param_coordinator.py:355 and 396-404: when gathered "
        "parameters are released; a release frees a full copy, never the shard"),
    "stage3_max_reuse_distance": Promise((3,), 8, _ALL,
        "runtime/zero/partitioned_param_coordinator.py:488 (__params_to_release): a parameter "
        "reused within the distance stays gathered; the shard is unchanged"),
    "sub_group_size": Promise((3,), 8, _ALL,
        "runtime/zero/stage3.py:904-925 cuts the flat fp32 partition into consecutive sub-groups, "
        "2042 steps each (elementwise optimizers); the norm over sub-groups (2031), whose sum "
        "order follows the sub-groups, scales the gradients only when gradient_clipping > 0 "
        "(2112). The replay gives gradient_clipping 0.0 on every version "
        "(engines/deepspeed_adapter.py deepspeed_config; master's default is 1.0, "
        "runtime/constants.py:261): with clipping this knob is not inert", without_clipping=True),
    "allgather_bucket_size": Promise((3,), 8, _ALL,
        "runtime/engine.py:1617-1640 builds the stage-3 optimizer without it (stages 1-2 only, "
        "engine.py:1513, 1562)"),
    "round_robin_gradients": Promise((3,), 8, _ALL,
        "runtime/engine.py:1617-1640 builds the stage-3 optimizer without it (stages 1-2 only, "
        "engine.py:1575)"),
})
# The zero_optimization keys that are no knob: they change what is partitioned, by design.
NOT_KNOBS = schema.some("config_keys", "stage", "stage3_param_persistence_threshold")
assert set(PROMISES) == {k.name for k in schema.CONFIG_ZERO_KEYS + schema.CONFIG_ZERO_FLAGS} - set(NOT_KNOBS), \
    "every ZeRO knob of the language has its promise (or its exclusion by version and world) here"

DEFAULT_FRACTION = 0.25


def inert(stage, world_size, version, clipping=0.0):
    """Returns the knobs inert for a replay at `stage` and `world_size` on DeepSpeed `version`,
    the config's gradient_clipping `clipping` (0: none)."""
    return tuple(name for name, p in PROMISES.items()
                 if stage in p.stages and world_size <= p.max_world
                 and any(str(version).startswith(v) for v in p.versions)
                 and not (p.without_clipping and clipping))


def chosen(name, fraction, seed=0):
    """Whether scenario `name` gets its second replay: the same answer every run (seeded by the
    name and `seed`), true for about `fraction` of the names."""
    digest = hashlib.sha256(f"{seed}:{name}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64 < fraction


def knob_seed(name, seed=0):
    """The seed of scenario `name`'s second draw of its knobs (the same every run)."""
    return int.from_bytes(hashlib.sha256(f"knobs:{seed}:{name}".encode("utf-8")).digest()[:8], "big")


def _sizes(numels, world_size):
    """The sizes a bucket, prefetch, live or reuse limit is drawn around (as the C++ draw does,
    harness/scenario/draw/draw_scenario.cc): every numel, every partition ceil(n/W), every
    running total in either order."""
    sizes = set(numels) | {-(-n // world_size) for n in numels}
    for order in (list(numels), list(reversed(numels))):
        total = 0
        for n in order:
            total += n
            sizes.add(total)
    return sorted(sizes)


def redraw(zero, knobs, numels, world_size, seed):
    """Returns {knob: (old, new)} after drawing each of `knobs` again in `zero` (the effective
    config's zero_optimization, changed in place): a size on, one below or one above one of the
    scenario's sizes (or its default, or its smallest), a flag flipped; at least one knob
    changes when any can. `numels`: the model's parameters' element counts."""
    rng = random.Random(seed)
    keys = {k.name: k for k in schema.CONFIG_ZERO_KEYS}
    sizes = _sizes(numels, world_size) or [1]
    changed = {}
    for name in knobs:
        old = zero.get(name)
        if name in keys:
            key = keys[name]
            pick = rng.random()
            if pick < 0.2:
                new = key.default
            elif pick < 0.3:
                new = key.lo
            else:
                new = rng.choice(sizes) + rng.choice((-1, 0, 1))
            new = max(key.lo, min(key.hi, new))
        else:
            new = not old if rng.random() < 0.75 else old
        zero[name] = new
        if new != old:
            changed[name] = (old, new)
    if not changed and knobs:  # one knob at least: a replay with nothing changed proves nothing
        name = sorted(knobs)[0]
        old = zero.get(name)
        if name in keys:
            zero[name] = next((s for s in sizes if s != old and s >= keys[name].lo), old + 1)
        else:
            zero[name] = not old
        changed[name] = (old, zero[name])
    return changed


def _describe(changed):
    return ", ".join(f"{k} {_json(old)} -> {_json(new)}" for k, (old, new) in sorted(changed.items()))


def _json(value):
    return str(value).lower() if isinstance(value, bool) else str(value)


def first_difference(first, second):
    """Returns (rank, entry index, field) of the first difference of two replays' traces (lists
    per rank of [{"op_index", "op", field: digest}]), or None when they agree."""
    for rank, (mine, theirs) in enumerate(zip(first, second)):
        for i, (a, b) in enumerate(zip(mine, theirs)):
            for name in FIELDS:
                if a.get(name) != b.get(name):
                    return rank, i, name
        if len(mine) != len(theirs):
            return rank, min(len(mine), len(theirs)), "operations"
    if len(first) != len(second):
        return min(len(first), len(second)), 0, "ranks"
    return None


def unreadable(first, second, where):
    """Why one replay's state could not be read at the difference `where` (trace entries'
    "unreadable"), or None: a state the adapter cannot read is no promise broken."""
    rank, index, name = where
    if name not in ("parameters", "optimizer", "steps"):
        return None
    for traces in (first, second):
        if rank < len(traces) and index < len(traces[rank]) and traces[rank][index].get("unreadable"):
            return traces[rank][index]["unreadable"]
    return None


def describe_difference(traces, where):
    """"op 3 (step): parameters" for first_difference's answer `where` over `traces`."""
    rank, index, name = where
    entry = traces[rank][index] if rank < len(traces) and index < len(traces[rank]) else {}
    at = (f"op {entry['op_index']} ({entry.get('op')})" if entry.get("op_index") is not None
          else entry.get("op") or "the end")
    return f"{at}: {name}"


def raised_at(per_rank, op_index):
    """(the exceptions the ranks' replay reported at `op_index`, one line each; the upstream
    code that raised the first, or None) from the finding dicts of `per_rank`, for a finding on
    "errors"."""
    texts, origin = [], None
    for findings in per_rank:
        for f in findings:
            if f.get("invariant") == "op" and f.get("op_index") == op_index and f.get("exception"):
                line = str(f["exception"]).splitlines()[0][:200]
                if line not in texts:
                    texts.append(line)
                origin = origin or f.get("origin")
    return texts, origin


def finding(first, second, changed, where, raised=((), None), raised_first=False):
    """The I10 finding (a dict as findings/verdict.Finding holds) for the difference `where`
    (first_difference's answer): every rank that differs at that entry and field. `raised`: what
    one replay raised there (raised_at; the first replay's when `raised_first`), named in the
    finding, its origin the finding's, when the errors differ."""
    rank, index, name = where
    ranks = [r for r, (mine, theirs) in enumerate(zip(first, second))
             if index < min(len(mine), len(theirs)) and mine[index].get(name) != theirs[index].get(name)]
    entry = first[rank][index] if index < len(first[rank]) else {}
    other = second[rank][index] if index < len(second[rank]) else {}
    op = entry.get("op") or other.get("op") or ""
    at = f"op {entry['op_index']} ({op})" if entry.get("op_index") is not None else (op or "build")
    texts, origin = raised
    which = "the scenario's knobs" if raised_first else "the others"
    return asdict(Finding(
        invariant=INVARIANT, op_index=entry.get("op_index"), op=op, attribute=name,
        expected=entry.get(name), actual=other.get(name), ranks=ranks or [rank], origin=origin,
        message=(f"after {at} rank {rank}'s {name} differ when the knobs that promise not to "
                 f"change the numbers change ({_describe(changed)}): digest {entry.get(name)} "
                 f"with the scenario's knobs, {other.get(name)} with the others"
                 + (f"; with {which} it raised: {' | '.join(texts)}" if texts else ""))))


def ended(failure, kind):
    """The I10 finding for a second replay that crashed or hung (`failure`: that outcome's
    finding dict) where the first one finished."""
    return asdict(Finding(
        invariant=INVARIANT, op_index=failure.get("op_index"), op=failure.get("op") or "",
        attribute="outcome", expected="done", actual=kind, exception=failure.get("exception"),
        ranks=list(failure.get("ranks") or []),
        message=f"with the knobs that promise not to change the numbers drawn again, the replay "
                f"ended in a {kind} where it finished with the scenario's: {failure.get('message')}"))
