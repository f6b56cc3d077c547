"""Findings and verdict files: what a replay found, merged over ranks, written as JSON.

A finding names the invariant, the operation index, the module path (and parameter), the
attribute, what was expected and what was there, and any exception text. The same finding on
several ranks is one entry listing its ranks.
"""

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, field

from ..scenario import schema

# The invariants an upstream replay checks (rows of the schema's table),
# and the other ways a replay fails: an operation raised, a rank process died or hung.
CHECKED_INVARIANTS = schema.some("invariants", "I1", "I2", "I3", "I4", "I5", "I6", "I9", "I10",
                                 "I11")
FAILURES = ("op", "crash", "hang")
# The invariants numerics.py (I3, I4, I9; I11 through oracles/overflow.py), checkpoints.py (I6)
# and the suite's second replay (I10, oracles/inert_knobs.py) check, each check counted as made or not made (with the reason);
# each can be switched off (--disable, --ablate).
NEW_INVARIANTS = schema.some("invariants", "I3", "I4", "I6", "I9", "I10", "I11")
# What is wrong in a consolidated state dict whose value is not the dense twin's (an I6 finding's
# origin["wrong"], oracles/checkpoints.py); root_causes.py joins it to an earlier I3 divergence.
DIFFERS_FROM_THE_TWIN = "a value differs from the dense twin's"


@dataclass
class Tally:
    """Per invariant: checks made, and checks not made by reason."""

    checked: Counter = field(default_factory=Counter)
    not_checked: dict = field(default_factory=dict)  # invariant -> Counter(reason)

    def done(self, invariant):
        self.checked[invariant] += 1

    def skip(self, invariant, reason):
        self.not_checked.setdefault(invariant, Counter())[reason] += 1

    def to_json(self):
        return {inv: {"checked": self.checked[inv],
                      "not_checked": dict(self.not_checked.get(inv, Counter()))}
                for inv in NEW_INVARIANTS}


def merge_tallies(tallies):
    """Sums tally dicts ({"I3": {"checked": n, "not_checked": {reason: n}}}) over scenarios."""
    total = {inv: {"checked": 0, "not_checked": Counter()} for inv in NEW_INVARIANTS}
    for tally in tallies:
        for inv, entry in (tally or {}).items():
            if inv not in total:
                continue
            total[inv]["checked"] += entry.get("checked", 0)
            total[inv]["not_checked"].update(entry.get("not_checked", {}))
    return {inv: {"checked": e["checked"], "not_checked": dict(e["not_checked"].most_common())}
            for inv, e in total.items()}


@dataclass
class Finding:
    invariant: str  # one of CHECKED_INVARIANTS or FAILURES
    op_index: object  # int, or None for build time and teardown
    op: str = ""
    module_path: object = None
    param: object = None
    attribute: object = None
    expected: object = None  # JSON-ready (values.to_json)
    actual: object = None
    exception: object = None
    message: str = ""
    node_kind: object = None  # the scenario's node kind at module_path (signatures use it)
    ranks: list = field(default_factory=list)
    # The upstream code that wrote the attribute (I1, I2) or raised: provenance.Origin.to_json().
    origin: object = None
    # An operation's failure that follows from what an earlier one left, where no upstream code
    # raised it: {"action": "release", "op_index", "params", "why"} (replay/training.py), or
    # {"action": "failed save", "op_index", "exception", "why"}: a load of a save that raised, a
    # consolidation that raised on what it left (replay/checkpoints.py).
    after: object = None

    def __post_init__(self):
        assert self.invariant in CHECKED_INVARIANTS + FAILURES, self.invariant

    def identity(self):
        """What makes two findings the same one (ranks aside)."""
        data = asdict(self)
        data.pop("ranks")
        return json.dumps(data, sort_keys=True, default=str)

    def one_line(self):
        if self.op_index is not None:
            where = f"op {self.op_index} ({self.op})"
        else:
            where = self.op or "build"
        return f"{self.invariant} at {where}: {self.message}"


def merge_ranks(per_rank):
    """Returns one list of finding dicts from each rank's list, identical ones merged."""
    merged = {}
    for rank, findings in enumerate(per_rank):
        for data in findings:
            finding = Finding(**data)
            entry = merged.setdefault(finding.identity(), finding)
            if rank not in entry.ranks:
                entry.ranks.append(rank)
    return list(merged.values())


def write_json(path, data):
    """Writes `data` to `path` atomically (a reader never sees half a verdict)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False, default=str)
        f.write("\n")
    os.replace(tmp, path)


def verdict_json(scenario_name, adapter_name, adapter_version, findings, skipped, checks=None):
    return {
        "scenario": scenario_name,
        "adapter": adapter_name,
        "adapter_version": adapter_version,
        "ok": not findings,
        "findings": [asdict(f) for f in findings],
        "skipped": skipped,
        "checks": checks or {},
    }


def summary_json(adapter_name, adapter_version, per_scenario):
    """`per_scenario`: [(scenario name, [Finding])]."""
    flat = []
    for name, findings in per_scenario:
        for f in findings:
            flat.append(dict(asdict(f), scenario=name))
    return {
        "adapter": adapter_name,
        "adapter_version": adapter_version,
        "scenarios_run": len(per_scenario),
        "findings": flat,
    }
