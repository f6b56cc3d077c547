"""What a patch changed: this run's signatures against an earlier run's (`--baseline DIR`).

Only scenarios both runs replayed are compared (by name), so a baseline from a different
export cannot make every finding look new. A signature is `fixed` when only the baseline has it,
`new` when only this run has it, `unchanged` when both do; each comes with its count of findings
in each run and one example scenario.
"""

import json
import os
from collections import Counter


class BaselineError(Exception):
    """The baseline folder holds no readable summary.json of an earlier run."""


def load(directory):
    path = os.path.join(directory, "summary.json")
    try:
        with open(path, encoding="utf-8") as f:
            summary = json.load(f)
    except (OSError, ValueError) as e:
        raise BaselineError(f"--baseline {directory}: cannot read {path}: {e}") from None
    if not isinstance(summary.get("scenarios"), list):
        raise BaselineError(f"--baseline {directory}: {path} is not the summary of a "
                            f"`zerocheck upstream` run (no \"scenarios\" list)")
    return summary


def _signatures(scenarios, names, field="signatures"):
    counts, examples = Counter(), {}
    for s in scenarios:
        if s["name"] not in names:
            continue
        for sig in s.get(field, ()):
            counts[sig] += 1
            examples.setdefault(sig, s["name"])
    return counts, examples


def compare(baseline, current, field="signatures"):
    """Returns {"fixed", "new", "unchanged": [...], "scenarios_compared", "only_in_*"}, of the
    signatures or (`field` "root_causes") of the root causes."""
    before = {s["name"] for s in baseline["scenarios"]}
    after = {s["name"] for s in current["scenarios"]}
    common = before & after
    old_counts, old_examples = _signatures(baseline["scenarios"], common, field)
    new_counts, new_examples = _signatures(current["scenarios"], common, field)

    def entry(sig):
        return {"signature": sig, "baseline_count": old_counts.get(sig, 0),
                "count": new_counts.get(sig, 0),
                "example_scenario": new_examples.get(sig) or old_examples.get(sig)}

    return {
        "baseline_version": baseline.get("adapter_version"),
        "scenarios_compared": len(common),
        "only_in_baseline": sorted(before - after),
        "only_in_this_run": sorted(after - before),
        "fixed": [entry(s) for s in sorted(old_counts) if s not in new_counts],
        "new": [entry(s) for s in sorted(new_counts) if s not in old_counts],
        "unchanged": [entry(s) for s in sorted(new_counts) if s in old_counts],
    }


def status(comparison):
    """{signature or cause: "new", "fixed" or "unchanged"} of a comparison."""
    return {e["signature"]: label for label in ("fixed", "new", "unchanged")
            for e in comparison[label]}


def lines(comparison):
    """The comparison as a few lines of text for the terminal and report."""
    out = [f"against the baseline ({comparison['baseline_version']}), "
           f"{comparison['scenarios_compared']} scenario(s) in both runs: "
           f"{len(comparison['fixed'])} fixed, {len(comparison['new'])} new, "
           f"{len(comparison['unchanged'])} unchanged"]
    for label in ("fixed", "new", "unchanged"):
        for e in comparison[label]:
            out.append(f"  {label:<9} {e['baseline_count']:>3} -> {e['count']:>3}  {e['signature']}"
                       f"  (e.g. {e['example_scenario']})")
    return out
