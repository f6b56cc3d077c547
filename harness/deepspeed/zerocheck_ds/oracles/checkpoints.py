"""I6 on an upstream engine: after a load, the engine holds exactly what was saved.

At a save every rank reads what a checkpoint must restore (the adapter's checkpoint_state():
each parameter, its fp32 master copy and every optimizer state field), the ranks' pieces are
assembled whole with plain torch.distributed (the checks' own group, exchange.py), and the
result is kept under the checkpoint's tag. After a load the same is read and assembled again
and must equal the tag's snapshot bit for bit (as numbers, a NaN matching a NaN): a load that
picked another tag, a rank that restored a stale partition, a field the load dropped or added,
each is a finding naming the parameter and the field.

What a load restores depends on its options (`expected_after_load`): the optimizer's fields
come from the checkpoint only with optimizer_states and without module_only; otherwise they
must be as they were before the load.

Every rank makes the same two collectives per reading (an object exchange of the layout, one
flat all_gather); a check never raises (a failure of the check itself is an `op` finding that
says so).
"""

import traceback

import torch

from ..findings.verdict import DIFFERS_FROM_THE_TWIN, Finding
from ..world.exchange import ExchangeError
from .engine_state import StateUnavailable
from .inside import GATHERED_LATE
from .numerics import difference, describe_gap

# The fields a load restores from the checkpoint whatever its options; every other field is
# optimizer state.
MODEL_FIELDS = ("value",)
MASTER_FIELDS = ("master",)


class Unreadable(Exception):
    """The state could not be read or assembled on some rank; the message says why."""


class CheckpointChecks:
    """The I6 oracle of one replay on one rank; `tally` counts checks made and not made."""

    def __init__(self, rank, world_size, exchange, tally):
        self.rank = rank
        self.world_size = world_size
        self._exchange = exchange
        self.tally = tally
        self._snapshots = {}  # tag (None: saved without one) -> {(name, field): whole tensor}
        self._latest = None  # the tag of the last save, as a key of _snapshots

    # ---- reading ------------------------------------------------------------------------------

    def read(self, engine, adapter):
        """{(name, field): whole tensor} assembled from every rank (all ranks call this).

        Raises Unreadable when any rank could not read its state (every rank raises alike).
        """
        return self._read(engine, adapter)[0]

    def _read(self, engine, adapter, note=None):
        """(read()'s state, [each rank's `note`]): a note travels with the layout's exchange."""
        mine, error = {}, None
        try:
            mine = adapter.checkpoint_state(engine) if engine is not None else {}
        except StateUnavailable as e:
            error = str(e)
        except Exception as e:  # noqa: BLE001 - said as the reason, this rank still exchanges
            error = f"reading the checkpoint state raised {type(e).__name__}: {e}"
        layout = {key: (t.numel(), whole) for key, (t, whole) in mine.items()}
        try:
            everyone = self._exchange.objects({"layout": layout, "error": error, "note": note})
        except ExchangeError as e:
            raise Unreadable(str(e)) from e
        errors = [f"rank {r}: {s['error']}" for r, s in enumerate(everyone) if s["error"]]
        if errors:
            raise Unreadable("; ".join(errors))
        keys = sorted({key for s in everyone for key in s["layout"]}, key=str)
        sizes = {key: max(s["layout"].get(key, (0, None))[0] for s in everyone) for key in keys}
        pieces = []
        for key in keys:
            piece = torch.full((sizes[key],), float("nan"), dtype=torch.float32)
            if key in mine:
                t = mine[key][0].detach().reshape(-1).float()
                piece[:t.numel()] = t[:sizes[key]]
            pieces.append(piece)
        flat = torch.cat(pieces) if pieces else torch.zeros(0)
        try:
            gathered = self._exchange.flat(flat)
        except ExchangeError as e:
            raise Unreadable(str(e)) from e
        out, offset = {}, 0
        for key in keys:
            size = sizes[key]
            wholes = {s["layout"][key][1] for s in everyone if key in s["layout"]}
            whole = wholes.pop() if len(wholes) == 1 else None
            if whole is None:  # held whole on each rank: this rank's copy (I9 compares ranks)
                out[key] = gathered[self.rank][offset:offset + size].clone() if key in mine else None
            else:
                out[key] = torch.cat([g[offset:offset + size] for g in gathered])[:whole].clone()
            offset += size
        return ({key: value for key, value in out.items() if value is not None},
                [s.get("note") for s in everyone])

    # ---- events -------------------------------------------------------------------------------

    def saved(self, index, op, tag, engine, adapter):
        """After a save that succeeded on this rank (all ranks call it); returns findings."""
        try:
            self._snapshots[tag] = self.read(engine, adapter)
            self._latest = tag
        except Unreadable as e:
            self._snapshots.pop(tag, None)
            self._latest = None
            self.tally.skip("I6", f"the state could not be read at the save: {e}")
        except Exception:  # noqa: BLE001
            return [self._check_failed(index, op)]
        return []

    def consolidated(self, index, op, tag, directory, engine, adapter, expected, masters=None,
                     after_gathered_edit=False):
        """After a save: each consolidated state dict the engine offers (rank 0) equals
        `expected` ({state dict key: the twin's value}, tied parameters under each of their
        keys; None: the twin does not follow), or `masters` (the same with the twin's fp32
        masters; None: as `expected`) for those the adapter says consolidate the fp32 masters
        (its FP32_MASTER_CONSOLIDATIONS); `after_gathered_edit`: the twin holds an edit a gather
        published (a value that differs says so). Every rank calls it; returns findings."""
        try:
            dicts = adapter.consolidated(engine, directory, tag)
        except Exception:  # noqa: BLE001
            return [self._check_failed(index, op)]
        if expected is None:
            self.tally.skip("I6", "consolidation: the dense twin does not follow the engine")
            return []
        findings = []
        for what, state in dicts.items():
            self.tally.done("I6")
            if isinstance(state, BaseException):
                findings.append(Finding(
                    invariant="I6", op_index=index, op=op, attribute=what,
                    exception=f"{type(state).__name__}: {state}", expected="a state dict",
                    actual=type(state).__name__,
                    message=f"after op {index} ({op}) {what} raised {type(state).__name__}: {state}"))
                continue
            of_masters = what in getattr(adapter, "FP32_MASTER_CONSOLIDATIONS", ())
            findings += compare_state_dict(index, op, what,
                                           masters if of_masters and masters else expected, state,
                                           after_gathered_edit)
        return findings

    def adopt(self, tag, state):
        """`state` is what the save `tag` wrote (a save another world made: reshard.py)."""
        self._snapshots[tag] = state
        self._latest = tag

    def snapshot_of(self, tag):
        """The snapshot a load of `tag` (None: the latest) must restore, or None."""
        key = self._latest if tag is None else tag
        return self._snapshots.get(key)

    def before_load(self, engine, adapter):
        """The state before a load (all ranks call it), or the reason it could not be read."""
        try:
            return self.read(engine, adapter), None
        except Unreadable as e:
            return None, str(e)

    def loaded(self, index, op, expected, engine, adapter, before=None):
        """After a load: the engine must hold `expected` ({(name, field): tensor}); findings, each
        saying which other state the wrong value is (another save's, or the one before the load:
        `before`), when it is one of them."""
        try:
            try:
                actual, notes = self._read(engine, adapter, adapter.published_late(engine))
            except Unreadable as e:
                self.tally.skip("I6", f"the state could not be read after the load: {e}")
                return []
            self.tally.done("I6")
            others = [((f"what the save with tag {tag!r} wrote" if tag is not None else
                        "what the untagged save wrote"), "another save's value", snapshot)
                      for tag, snapshot in self._snapshots.items()]
            # Values rebuilt from a save's fp32 masters where they differed from its values: a
            # gathered edit reaches the parameters, never the masters (DeepSpeed's documented
            # loss of the edit), and a load that restores the values from the masters loses it.
            others += [((f"the fp32 master the save with tag {tag!r} wrote" if tag is not None
                         else "the fp32 master the untagged save wrote"), "the save's fp32 master",
                        values_from_masters(snapshot))
                       for tag, snapshot in self._snapshots.items()]
            if before is not None:
                # Also as a load that restored nothing but rebuilt the fp32 masters from the
                # parameters (R10: no ZeRO checkpoint read) leaves it: with 16-bit parameters
                # those masters are the old values widened, not the old masters.
                others += [("what it held before the load", "the value before the load", state)
                           for state in (before, masters_from_values(before))]
            return published_late(compare(index, op, expected, actual, others),
                                  sorted({name for note in notes for name in note or ()}))
        except Exception:  # noqa: BLE001
            return [self._check_failed(index, op)]

    def _check_failed(self, index, op):
        text = traceback.format_exc()
        return Finding(invariant="op", op_index=index, op=f"{op} (I6 check)", exception=text,
                       message=f"zerocheck's I6 check after op {index} ({op}) raised "
                               f"{text.strip().splitlines()[-1]}: a bug of the harness, not of "
                               f"the engine")


def published_late(findings, names):
    """`findings` with each one of a parameter of `names` (whose shard some rank found not as the
    load wrote it into the gathered copy: adapter.published_late) given that origin: on Gloo the
    gather landing after the write, whatever value it then shows (the one before the load, or a
    mix of ranks' parts), is its root cause."""
    for finding in findings:
        name = f"{finding.module_path}.{finding.param}" if finding.module_path else finding.param
        if name in names:
            finding.origin = {"action": "published late", "file": GATHERED_LATE[0],
                              "function": GATHERED_LATE[1]}
            finding.message += (" (the shard is not what load_module_state_dict wrote into the "
                                "gathered copy: the copy changed before GatheredParameters "
                                "published it)")
    return findings


def expected_after_load(saved, before, optimizer_states=True, module_only=False):
    """What the engine must hold after a load of the checkpoint `saved` with these options.

    The parameters always come from the checkpoint. The fp32 masters and the optimizer's fields
    come from it with optimizer_states and without module_only; without optimizer states the
    masters are the loaded parameters (the optimizer's copy is rebuilt from the module) and the
    fields stay as they were (`before`, None when it could not be read: those keys unchecked).
    """
    if optimizer_states and not module_only:
        return dict(saved)
    out = {key: value for key, value in saved.items() if key[1] in MODEL_FIELDS}
    out.update({key: value for key, value in masters_from_values(saved).items()
                if key[1] in MASTER_FIELDS and (key[0], "value") in saved})
    for key, value in (before or {}).items():
        if key[1] not in MODEL_FIELDS + MASTER_FIELDS:
            out[key] = value
    return out


def masters_from_values(state):
    """`state` ({(name, field): tensor}) with each master replaced by its parameter's value."""
    return {(name, field): state.get((name, "value"), value) if field in MASTER_FIELDS else value
            for (name, field), value in state.items()}


def values_from_masters(state):
    """{(name, "value"): its fp32 master} for each parameter of `state` that has a master."""
    return {(name, "value"): value for (name, field), value in state.items()
            if field in MASTER_FIELDS}


def compare(index, op, expected, actual, others=()):
    """I6 findings: each (name, field) of `expected` missing from or different in `actual`, and
    each field `actual` holds that the checkpoint did not. `others`: [(what, kind, {key: tensor})],
    states a wrong value is named after (the message: what; the signature: kind) when it equals
    one of them."""
    findings = []

    def finding(name, field, expected_value, actual_value, text):
        module, _, param = name.rpartition(".")
        findings.append(Finding(
            invariant="I6", op_index=index, op=op, module_path=module, param=param or name,
            attribute=field, expected=expected_value, actual=actual_value, message=text))

    for (name, field), value in sorted(expected.items(), key=str):
        got = actual.get((name, field))
        if got is None:
            finding(name, field, "present", "missing after the load",
                    f"after op {index} ({op}) {name!r} has no {field!r}; the checkpoint has one")
            continue
        gap = difference(value, got)
        if gap is not None:
            same = [(what, kind) for what, kind, state in others
                    if (name, field) in state and difference(state[(name, field)], got) is None
                    and difference(state[(name, field)], value) is not None]
            hint = f"; it is {same[0][0]}" if same else ""
            if same:  # which wrong state it is tells one bug from another (the signature's)
                gap["same_as"] = same[0][1]
            finding(name, field, "the saved value", gap,
                    f"after op {index} ({op}) {name!r} {field!r} is not what was saved: "
                    f"{describe_gap(gap, 'saved')}{hint}")
    for name, field in sorted(set(actual) - set(expected), key=str):
        finding(name, field, "absent", "held though the checkpoint had none",
                f"after op {index} ({op}) {name!r} holds {field!r}, which the checkpoint did not")
    return findings


def compare_state_dict(index, op, what, expected, actual, after_gathered_edit=False):
    """I6 findings of a consolidated state dict `actual` against `expected` (both {key: tensor}):
    every key present, nothing else, each value equal as numbers (any dtype, compared as float32:
    the 16-bit dict of an fp32 model is fp32). Each finding's origin says what is wrong, the key
    of its root cause; a value that differs after a gathered edit says that too (DeepSpeed's
    documented loss of such an edit in its fp32 master is a cause of its own)."""
    findings = []

    def finding(key, expected_value, actual_value, text):
        module, _, param = key.rpartition(".")
        # What is wrong keys the root cause: a key missing and a value that differs are two bugs.
        wrong = (actual_value if isinstance(actual_value, str) else
                 DIFFERS_FROM_THE_TWIN + (" after a gathered edit" if after_gathered_edit
                                          else ""))
        findings.append(Finding(
            invariant="I6", op_index=index, op=op, module_path=module, param=param,
            attribute=what, expected=expected_value, actual=actual_value,
            origin={"action": "consolidated", "wrong": wrong},
            message=f"after op {index} ({op}) {what}: {text}"))

    for key, value in expected.items():
        if key not in actual:
            finding(key, "present", "a key of the model's state dict is missing",
                    f"{key!r} is missing")
            continue
        got = actual[key]
        if not torch.is_tensor(got) or tuple(got.shape) != tuple(value.shape):
            finding(key, list(value.shape), "a value of another shape",
                    f"{key!r} has shape {list(getattr(got, 'shape', []))}, not {list(value.shape)}")
            continue
        gap = difference(value, got)
        if gap is not None:
            finding(key, "the dense twin's value", gap,
                    f"{key!r} differs from the dense twin's: {describe_gap(gap)}")
    for key in sorted(set(actual) - set(expected)):
        finding(key, "absent", "a key the model's state dict does not have",
                f"{key!r} is not a key of the model's state dict")
    return findings
