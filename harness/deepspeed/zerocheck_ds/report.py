"""What a suite run found, three ways: progress lines, one screen of summary, report.md and
summary.json (the machine-readable form `--baseline` reads back).
"""

import os
import time
from collections import Counter

from . import baseline as baseline_module
from .verdict import merge_tallies

SUMMARY_FORMAT = "zerocheck-upstream-summary/1"
_SCREEN_SIGNATURES = 15


class Run:
    """The state of one suite run: verdicts in order, then grouping, baseline and shrinking."""

    def __init__(self, args, files):
        self.args = args
        self.files = files  # scenario name -> file
        self.verdicts = []
        self.started = time.monotonic()
        self.seconds = 0.0
        self.version = None
        self.rank_starts = 0
        self.finished = False
        self.interrupted = False
        self.baseline = None
        self.minimal = {}  # signature -> what minimise.py produced
        self.ablation = {}  # --ablate: scenario -> {invariant off: invariants left, or "survives"}

    def add(self, result):
        self.verdicts.append(result)

    def finish(self, version, rank_starts):
        self.seconds = time.monotonic() - self.started
        self.version, self.rank_starts, self.finished = version, rank_starts, True

    def signature_counts(self):
        return Counter(f["signature"] for v in self.verdicts for f in v["findings"])

    def groups(self):
        """signature -> {"invariant", "count", "scenarios", "example": finding}, by count."""
        groups = {}
        for v in self.verdicts:
            for f in v["findings"]:
                g = groups.setdefault(f["signature"], {"signature": f["signature"],
                                                       "invariant": f["invariant"], "count": 0,
                                                       "scenarios": [], "example": f})
                g["count"] += 1
                if v["scenario"] not in g["scenarios"]:
                    g["scenarios"].append(v["scenario"])
        return sorted(groups.values(), key=lambda g: (-len(g["scenarios"]), g["signature"]))

    def outcomes(self):
        return Counter(v["outcome"] for v in self.verdicts)

    def replay_command(self, scenario_file, out):
        a = self.args
        tree = f" --deepspeed-tree {a.deepspeed_tree}" if a.deepspeed_tree else ""
        tree += f" --stage {a.stage}" if a.stage != 3 else ""
        if a.replay_command:
            return f"{a.replay_command} --world {a.world}{tree} --scenarios {scenario_file} --out {out}"
        return (f"PYTHONPATH={os.path.dirname(os.path.dirname(os.path.abspath(__file__)))} "
                f"python3 -m zerocheck_ds suite --adapter {a.adapter} --world {a.world}{tree} "
                f"--scenarios {scenario_file} --out {out}")

    def summary(self):
        groups = []
        for g in self.groups():
            sig = g["signature"]
            example = g["scenarios"][0]
            entry = {
                "signature": sig, "invariant": g["invariant"], "count": g["count"],
                "scenarios": g["scenarios"], "example": g["example"],
                "replay_command": self.replay_command(
                    self.files.get(example, example),
                    os.path.join(self.args.out, "replay")),
            }
            if sig in self.minimal:
                entry["minimal"] = self.minimal[sig]
                entry["replay_command"] = self.replay_command(
                    self.minimal[sig]["scenario"], os.path.join(self.args.out, "replay"))
            groups.append(entry)
        per_minute = len(self.verdicts) / self.seconds * 60 if self.seconds else None
        return {
            "format": SUMMARY_FORMAT,
            "adapter": self.args.adapter,
            "adapter_version": self.version,
            "deepspeed_tree": self.args.deepspeed_tree,
            "world_size": self.args.world,
            "stage": self.args.stage,
            # I3, I4, I6, I9: checks made, and not made by reason, over every scenario.
            "disabled": list(self.args.disabled),
            "checks": merge_tallies(v.get("checks") for v in self.verdicts),
            "scenarios_run": len(self.verdicts),
            "interrupted": self.interrupted,
            "outcomes": dict(self.outcomes()),
            "seconds": round(self.seconds, 2),
            "scenarios_per_minute": round(per_minute, 2) if per_minute else None,
            "rank_starts": self.rank_starts,
            "checkpoints": checkpoint_disk(self.verdicts, self.args),
            "signatures": groups,
            "crashes": [_brief(v) for v in self.verdicts if v["outcome"] == "crash"],
            "hangs": [_brief(v) for v in self.verdicts if v["outcome"] == "hang"],
            "scenarios": [{"name": v["scenario"], "outcome": v["outcome"],
                           "signatures": sorted({f["signature"] for f in v["findings"]})}
                          for v in self.verdicts],
            "baseline": self.baseline,
            "ablation": _ablation(self.ablation) if self.args.ablate else None,
        }


def _ablation(rows):
    """The --ablate matrix and, per invariant, the caught scenarios that survive without it."""
    offs = sorted({off for row in rows.values() for off in row if off != "all"})
    return {"matrix": rows,
            "necessary_for": {off: sorted(n for n, row in rows.items()
                                          if row["all"] != "none" and row.get(off) == "survives")
                              for off in offs}}


def _brief(verdict):
    return {"scenario": verdict["scenario"], "message": verdict["findings"][0]["message"],
            "notes": verdict["notes"]}


def progress_line(i, total, result):
    status = {"ok": "ok   ", "findings": "FAIL ", "crash": "CRASH", "hang": "HANG "}[result["outcome"]]
    text = f"  [{i}/{total}] {status} {result['scenario']} ({result['seconds']:.1f} s)"
    if result["findings"]:
        text += f": {len(result['findings'])} finding(s), e.g. {result['findings'][0]['signature']}"
    return text


def screen(run):
    """One screen: totals, the signatures, crashes and hangs, the baseline, where files are."""
    s = run.summary()
    outcomes = ", ".join(f"{n} {k}" for k, n in sorted(s["outcomes"].items()))
    lines = [f"zerocheck upstream: {s['adapter']} {s['adapter_version']}, world {s['world_size']}, "
             f"ZeRO stage {s['stage']}: "
             f"{s['scenarios_run']} scenario(s) in {s['seconds']:.0f} s "
             f"({s['scenarios_per_minute'] or 0:.1f}/min, {s['rank_starts']} rank start(s)): "
             f"{outcomes or 'none'}"]
    if s["interrupted"]:
        lines.append("INTERRUPTED: the verdicts above are all there is")
    lines += _checks_lines(s, limit=3)
    lines.append(f"{len(s['signatures'])} distinct finding signature(s):")
    for g in s["signatures"][:_SCREEN_SIGNATURES]:
        shrunk = ""
        if "minimal" in g:
            m = g["minimal"]
            shrunk = f"  -> {os.path.relpath(m['repro'], run.args.out)}" if m.get("repro") else ""
        lines.append(f"  {len(g['scenarios']):>3} scen {g['count']:>4}x  {g['signature']}{shrunk}")
    if len(s["signatures"]) > _SCREEN_SIGNATURES:
        lines.append(f"  ... {len(s['signatures']) - _SCREEN_SIGNATURES} more in report.md")
    for label in ("crashes", "hangs"):
        for c in s[label]:
            lines.append(f"  {label[:-2] if label == 'crashes' else 'hang'}: {c['scenario']}: "
                         f"{c['message']}")
    if run.baseline is not None:
        lines += baseline_module.lines(run.baseline)
    lines.append(f"report: {os.path.join(run.args.out, 'report.md')}")
    return lines


def _checks_lines(s, limit=None):
    """One line per new invariant: checks made and the commonest reasons a check was not made."""
    lines = []
    for inv, entry in s["checks"].items():
        if inv in s["disabled"]:
            lines.append(f"{inv}: switched off (--disable)")
            continue
        skipped = sorted(entry["not_checked"].items(), key=lambda kv: -kv[1])
        shown = skipped[:limit] if limit else skipped
        why = "; ".join(f"{n}x {reason}" for reason, n in shown)
        more = f"; ... {len(skipped) - len(shown)} more reasons" if len(shown) < len(skipped) else ""
        lines.append(f"{inv}: {entry['checked']} checks made"
                     + (f", {sum(entry['not_checked'].values())} not made: {why}{more}" if skipped else ""))
    return lines


def write_markdown(path, run):
    s = run.summary()
    out = [f"# zerocheck upstream report: {s['adapter']} {s['adapter_version']}", "",
           f"- world size {s['world_size']}, ZeRO stage {s['stage']}, DeepSpeed tree: "
           f"{s['deepspeed_tree'] or 'installed'}",
           f"- {s['scenarios_run']} scenario(s) in {s['seconds']} s "
           f"({s['scenarios_per_minute']} per minute, {s['rank_starts']} rank start(s))",
           f"- outcomes: " + ", ".join(f"{k} {n}" for k, n in sorted(s["outcomes"].items())),
           f"- interrupted: {s['interrupted']}", "", "## Checks of I3, I4, I6, I9", ""]
    out += [f"- {line}" for line in _checks_lines(s)] + ["", "## Findings by signature", ""]
    if not s["signatures"]:
        out.append("None: every invariant held.")
    for g in s["signatures"]:
        out += [f"### {g['signature']}", "",
                f"- {g['count']} finding(s) in {len(g['scenarios'])} scenario(s): "
                + ", ".join(g["scenarios"][:10]) + (" ..." if len(g["scenarios"]) > 10 else ""),
                f"- example: {g['example']['message']}"]
        if "minimal" in g and not g["minimal"]["reproducible"]:
            out.append("- not reproducible when its scenario runs alone (it needed an earlier "
                       "scenario on the same ranks, or it is flaky): not shrunk")
        elif "minimal" in g:
            m = g["minimal"]
            out.append(f"- minimal scenario: `{m['scenario']}` ({m['before']['ops']} -> "
                       f"{m['after']['ops']} ops, {m['before']['modules']} -> "
                       f"{m['after']['modules']} modules, {m['seconds']} s, {m['stopped']})")
            if not m.get("repro"):
                out.append("- no standalone script: an I3, I4 or I9 finding needs the dense twin "
                           "(the replay below reproduces it)")
            if m.get("repro"):
                out.append(f"- standalone script: `{m['repro']}`; run it: `{m['repro_command']}` "
                           f"(`--plain`: the same steps on plain PyTorch, must not reproduce)")
        out += [f"- replay: `{g['replay_command']}`", ""]
    for label in ("crashes", "hangs"):
        out += [f"## {label.capitalize()}", ""]
        out += [f"- {c['scenario']}: {c['message']}" + (f" ({'; '.join(c['notes'])})"
                                                        if c["notes"] else "")
                for c in s[label]] or ["None."]
        out.append("")
    if run.baseline is not None:
        out += ["## Against the baseline", "", "```"] + baseline_module.lines(run.baseline) + ["```"]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


def checkpoint_disk(verdicts, args):
    """Disk the scenarios' checkpoints took (each scenario's folder, measured before removal)."""
    sizes = [v.get("checkpoint_bytes", 0) for v in verdicts]
    return {"kept": bool(getattr(args, "keep_checkpoints", False)),
            "scenarios_saving": sum(1 for b in sizes if b),
            "max_bytes_per_scenario": max(sizes, default=0), "total_bytes": sum(sizes)}
