"""Findings and verdict files: what a replay found, merged over ranks, written as JSON.

A finding names the invariant, the operation index, the module path (and parameter), the
attribute, what was expected and what was there, and any exception text. The same finding on
several ranks is one entry listing its ranks.
"""

import json
import os
from dataclasses import asdict, dataclass, field

from . import schema

# The invariants an upstream replay checks (of the schema's I1..I8), and the other ways a
# replay fails: an operation raised, a rank process died or hung.
CHECKED_INVARIANTS = schema.some("invariants", "I1", "I2", "I5")
FAILURES = ("op", "crash", "hang")


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


def verdict_json(scenario_name, adapter_name, adapter_version, findings, skipped):
    return {
        "scenario": scenario_name,
        "adapter": adapter_name,
        "adapter_version": adapter_version,
        "ok": not findings,
        "findings": [asdict(f) for f in findings],
        "skipped": skipped,
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
