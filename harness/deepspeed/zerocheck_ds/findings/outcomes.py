"""From a pool Outcome to a scenario's verdict: findings merged over ranks, each with its signature.

Every scenario ends with exactly one verdict whose `outcome` is "ok", "findings", "crash" or
"hang". A crash or hang is itself a finding (invariant "crash"/"hang") naming the rank, the
signal and the step each rank was in, so it is grouped, baselined and shrunk like any other.
"""

from dataclasses import asdict

from .signatures import signature
from .verdict import Finding, merge_ranks, merge_tallies


def _step_text(step):
    if not step:
        return "not started"
    if step.get("op_index") is None:
        return step.get("op") or "build"
    return f"op {step['op_index']} ({step['op']})"


def _where(last_steps):
    return ", ".join(f"rank {r}: {_step_text(s)}" for r, s in enumerate(last_steps))


def outcome_findings(outcome, timeout):
    """Returns the finding dicts (merged over ranks) of one scenario's Outcome."""
    if outcome.kind == "done":  # and what the second world of a load found (suite --reshard)
        return ([asdict(f) for f in merge_ranks([r["findings"] for r in outcome.per_rank])]
                + list(getattr(outcome, "resumed", [])))
    if outcome.kind == "crash":
        step = outcome.last_steps[outcome.rank] if outcome.rank < len(outcome.last_steps) else None
        finding = Finding(
            invariant="crash", op_index=(step or {}).get("op_index"),
            op=(step or {}).get("op") or "start", actual=outcome.how, ranks=[outcome.rank],
            message=f"rank {outcome.rank} died ({outcome.how}) in {_step_text(step)}; "
                    f"last steps: {_where(outcome.last_steps)}")
    else:
        first = next((s for s in outcome.last_steps if s), None)
        finding = Finding(
            invariant="hang", op_index=(first or {}).get("op_index"),
            op=(first or {}).get("op") or "start", expected=f"a verdict within {timeout:g} s",
            ranks=list(range(len(outcome.last_steps))),
            message=f"no verdict after {timeout:g} s; the ranks were in: "
                    f"{_where(outcome.last_steps)}")
    return [asdict(finding)]


def skipped_of(outcome):
    """Rank 0's skipped operations (every rank skips the same ones)."""
    return outcome.per_rank[0]["skipped"] if outcome.kind == "done" and outcome.per_rank else []


def written_of(outcome):
    """Rank 0's attribute names asked for and really written (every rank writes the same)."""
    if outcome.kind != "done" or not outcome.per_rank:
        return {}
    return outcome.per_rank[0].get("written", {})


def checks_of(outcome):
    """Rank 0's tally of I3, I4 and I9 checks (every rank makes the same ones)."""
    if outcome.kind != "done" or not outcome.per_rank:
        return {}
    return merge_tallies([outcome.per_rank[0].get("checks", {})])


def verdict(name, adapter, version, outcome, findings, skipped, notes=(), stage=None, checks=None,
            written=None):
    """The verdict file's content; every finding carries its signature (and the stage in it)."""
    for f in findings:
        f["signature"] = signature(f, stage)
    kind = outcome.kind if outcome.kind != "done" else ("findings" if findings else "ok")
    return {
        "scenario": name,
        "adapter": adapter,
        "adapter_version": version,
        "outcome": kind,
        "ok": kind == "ok",
        "seconds": round(outcome.seconds, 3),
        "findings": findings,
        "skipped": skipped,
        "notes": list(notes),
        "stage": stage,
        "checks": checks or {},
        "written": written or {},
    }


def raising_steps(outcome):
    """Per rank, the steps where an adapter call raised: ranks that differ may be out of step."""
    return [sorted({(f.get("op_index") if f.get("op_index") is not None else -1, f.get("op"))
                    for f in r["findings"] if f.get("invariant") == "op"})
            for r in outcome.per_rank]
