"""What a suite run found, three ways: progress lines, one screen of summary, report.md and
summary.json (the machine-readable form `--baseline` reads back).
"""

import os
import re
import time
from collections import Counter

from . import baseline as baseline_module, issue_drafts, root_causes
from .issue_drafts import no_script_why, script_verified
from .verdict import merge_tallies

# /2: root causes, limits (the control's), not_checked, versions, per-scenario root causes.
SUMMARY_FORMAT = "zerocheck-upstream-summary/2"
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
        self.controls = {}  # signature -> the control's replay on the pass-through engine
        self.control_cost = None  # {"replays", "seconds"} of the controls (rank start included)
        self.versions = {}  # engine, torch, python (and commit) as the ranks reported them
        self.root_baseline = None  # the root causes against --baseline (when it has them)
        self.ablation = {}  # --ablate: scenario -> {invariant off: invariants left, or "survives"}

    def add(self, result):
        self.verdicts.append(result)

    def finish(self, version, rank_starts):
        self.seconds = time.monotonic() - self.started
        self.version, self.rank_starts, self.finished = version, rank_starts, True

    def signature_counts(self):
        """Findings per signature, less those the control showed are the replay's limits."""
        limits = self.limits()
        return Counter(f["signature"] for v in self.verdicts for f in v["findings"]
                       if f["signature"] not in limits)

    def limits(self):
        """Signatures the pass-through engine shows too: limits of the replay, not upstream's."""
        return {sig for sig, c in self.controls.items() if c["also_without_engine"]}

    def root_causes(self):
        return root_causes.group(self.verdicts, self.limits())

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
        tree += " --reshard" if getattr(a, "reshard", False) else ""
        if a.replay_command:
            return f"{a.replay_command} --world {a.world}{tree} --scenarios {scenario_file} --out {out}"
        return (f"PYTHONPATH={os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))} "
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
        limits = self.limits()
        for entry in groups:
            if entry["signature"] in self.controls:
                entry["control"] = self.controls[entry["signature"]]
        return {
            "format": SUMMARY_FORMAT,
            "adapter": self.args.adapter,
            "adapter_version": self.version,
            "versions": self.versions,
            "root_causes": self._causes(groups),
            "limits": [{"signature": g["signature"], "scenarios": g["scenarios"],
                        "reason": g["control"]["reason"], "control": g["control"]}
                       for g in groups if g["signature"] in limits],
            "coverage": attribute_coverage(self.verdicts),
            "not_checked": {"operations": skipped_reasons(self.verdicts),
                            "checks": {inv: e["not_checked"] for inv, e in
                                       merge_tallies(v.get("checks") for v in self.verdicts).items()}},
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
            "control_cost": self.control_cost,
            "checkpoints": checkpoint_disk(self.verdicts, self.args),
            "signatures": groups,
            "crashes": [_brief(v) for v in self.verdicts if v["outcome"] == "crash"],
            "hangs": [_brief(v) for v in self.verdicts if v["outcome"] == "hang"],
            "scenarios": [{"name": v["scenario"], "outcome": v["outcome"],
                           "signatures": sorted({f["signature"] for f in v["findings"]}),
                           "root_causes": sorted({title for title, f in
                                                  root_causes.scenario_causes(v)
                                                  if f["signature"] not in limits})}
                          for v in self.verdicts],
            "baseline": self.baseline,
            "ablation": _ablation(self.ablation) if self.args.ablate else None,
        }


    def _causes(self, groups):
        """The root causes with their triage, baseline status, repro and issue draft."""
        known = root_causes.known_upstream()
        bugs = issue_drafts.bug_table()  # root causes that are one bug share one draft
        status = baseline_module.status(self.root_baseline) if self.root_baseline else {}
        by_signature = {g["signature"]: g for g in groups}
        causes = []
        for cause in self.root_causes():
            cause["triage"] = known.get(cause["title"])
            if self.root_baseline is not None:
                cause["baseline"] = status.get(cause["title"], "unchanged")
            shrunk = [by_signature[s]["minimal"] for s in cause["signatures"]
                      if by_signature.get(s, {}).get("minimal", {}).get("reproducible")]
            with_script = [m for m in shrunk if m.get("repro")]
            verified = [m for m in with_script if script_verified(m)]
            cause["minimal"] = (verified or with_script or shrunk or [None])[0]
            cause["replay_command"] = by_signature[cause["signatures"][0]]["replay_command"]
            cause["draft"] = issue_drafts.draft_path(self.args.out, cause, bugs)
            causes.append(cause)
        if self.root_baseline is not None:
            causes += [{"id": root_causes.slug(e["signature"]), "title": e["signature"],
                        "baseline": "fixed", "signatures": [], "scenarios": [], "count": 0,
                        "example_scenario": e["example_scenario"]}
                       for e in self.root_baseline["fixed"]]
        return causes


def attribute_coverage(verdicts):
    """Per kind of object, the attribute names the scenarios asked for, and of those the names a
    verdict shows were really written on the engine's side: a name the replay refused every time
    (one Python reserves, like `forward` or `weight`) is not covered, whatever the export asked."""
    coverage = {}
    for kind in ("modules", "parameters"):
        asked, written = set(), set()
        for v in verdicts:
            entry = (v.get("written") or {}).get(kind, {})
            asked.update(entry.get("asked", ()))
            written.update(entry.get("written", ()))
        coverage[kind] = {"asked": len(asked), "covered": len(written & asked),
                          "never_written": sorted(asked - written)}
    return coverage


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_NUMBER = re.compile(r"\b\d+\b")


def skipped_reasons(verdicts):
    """{reason: operations skipped for it} over every verdict, the reasons' names and numbers
    (paths, counts) made generic so that one reason is one row."""
    counts = Counter()
    for v in verdicts:
        for entry in v.get("skipped", ()):
            reason = _NUMBER.sub("N", _QUOTED.sub("'...'", entry["reason"]))
            counts[f"{entry['op'] or 'build'}: {reason}"] += 1
    return dict(counts.most_common())


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
    lines += _not_checked_lines(s, limit=3)
    causes = [c for c in s["root_causes"] if c.get("baseline") != "fixed"]
    lines.append(f"{len(causes)} root cause(s) of {len(s['signatures']) - len(s['limits'])} "
                 f"upstream signature(s):")
    for c in causes[:_SCREEN_SIGNATURES]:
        mark = f"[{c['baseline']}] " if "baseline" in c else ""
        lines.append(f"  {len(c['scenarios']):>3} scen {len(c['signatures']):>3} sig  {mark}"
                     f"{c['title']}{_lines_text(c)}")
    if run.root_baseline is not None:
        b = run.root_baseline
        lines.append(f"root causes against the baseline: {len(b['fixed'])} fixed, "
                     f"{len(b['new'])} new, {len(b['unchanged'])} unchanged"
                     + "".join(f"\n  fixed: {e['signature']}" for e in b["fixed"]))
    for limit in s["limits"]:
        lines.append(f"  not upstream's (the control fails too): {limit['signature']}: "
                     f"{limit['reason']}")
    lines.append(f"{len(s['signatures'])} distinct finding signature(s):")
    for g in s["signatures"][:_SCREEN_SIGNATURES]:
        shrunk = ""
        if "minimal" in g:
            m = g["minimal"]
            shrunk = (f"  -> {os.path.relpath(m['repro'], run.args.out)} "
                      f"({'verified' if script_verified(m) else 'not verified'})"
                      if m.get("repro") else "")
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


def _lines_text(cause):
    location = cause.get("location")
    if not location:
        return ""
    return f" (line{'s' if len(location['lines']) > 1 else ''} " + \
        ", ".join(map(str, location["lines"])) + ")"


def _coverage_lines(s):
    """Attribute names really written on the engine's side, of those the scenarios asked for."""
    lines = []
    for kind, c in s["coverage"].items():
        never = c["never_written"]
        shown = ", ".join(never[:12]) + (f", ... {len(never) - 12} more" if len(never) > 12 else "")
        lines.append(f"attribute names on {kind}: {c['covered']} of {c['asked']} really written"
                     + (f"; never written (refused every time): {shown}" if never else ""))
    return lines


def _not_checked_lines(s, limit=None):
    """Operations skipped, by reason (the checks not made are in _checks_lines)."""
    ops = list(s["not_checked"]["operations"].items())
    if not ops:
        return ["operations skipped: none"] + _coverage_lines(s)
    shown = ops[:limit] if limit else ops
    more = f"; ... {len(ops) - len(shown)} more reasons" if len(shown) < len(ops) else ""
    return [f"operations skipped: {sum(n for _, n in ops)}: "
            + "; ".join(f"{n}x {reason}" for reason, n in shown) + more] + _coverage_lines(s)


def script_status(minimal):
    """How report.md names `minimal`'s script: verified only when the suite saw it work (a
    script is written from the replay's rules and can miss what the replay does), else
    unverified with the reason, as the issue drafts say it."""
    if script_verified(minimal):
        return ("standalone script, verified (REPRODUCED on the tree, NOT REPRODUCED with "
                "--plain)")
    check = minimal.get("script_check")
    why = (check.get("why") or "it did not print REPRODUCED on the tree and NOT REPRODUCED "
                               "with --plain") if check else "the suite did not run it"
    return f"script NOT verified ({why}); not a reproduction until it is"


def _cause_markdown(c, out_dir):
    if c.get("baseline") == "fixed":
        return [f"### {c['title']}", "", f"- fixed: in the baseline, not in this run (e.g. "
                                          f"{c['example_scenario']})", ""]
    lines = [f"### {c['title']}", ""]
    if c.get("baseline"):
        lines.append(f"- against the baseline: **{c['baseline']}**")
    if c["location"]:
        lines.append(f"- upstream location: `{c['location']['file']}` "
                     f"`{c['location']['function']}()`{_lines_text(c)}")
    lines.append(f"- {c['count']} finding(s) in {len(c['scenarios'])} scenario(s): "
                 + ", ".join(c["scenarios"][:10]) + (" ..." if len(c["scenarios"]) > 10 else ""))
    lines.append(f"- example: {c['example']['message']}")
    triage = c.get("triage")
    if triage:
        issues = ", ".join(f"[#{i['number']}]({i['url']})" for i in triage["issues"])
        lines.append(f"- KNOWN_UPSTREAM.md: {triage['verdict']}" + (f"; upstream: {issues}"
                                                                     if issues else ""))
    else:
        lines.append("- KNOWN_UPSTREAM.md: not triaged")
    lines.append(f"- issue draft: [{os.path.relpath(c['draft'], out_dir)}]"
                 f"({os.path.relpath(c['draft'], out_dir)})")
    if c.get("minimal") and c["minimal"].get("repro"):
        lines.append(f"- {script_status(c['minimal'])}: `{c['minimal']['repro']}`")
    lines.append("- signatures:")
    lines += [f"  - `{sig}`" for sig in c["signatures"]]
    return lines + [""]


def write_markdown(path, run):
    s = run.summary()
    out = [f"# zerocheck upstream report: {s['adapter']} {s['adapter_version']}", "",
           f"- world size {s['world_size']}, ZeRO stage {s['stage']}, DeepSpeed tree: "
           f"{s['deepspeed_tree'] or 'installed'}",
           f"- {s['scenarios_run']} scenario(s) in {s['seconds']} s "
           f"({s['scenarios_per_minute']} per minute, {s['rank_starts']} rank start(s))",
           f"- outcomes: " + ", ".join(f"{k} {n}" for k, n in sorted(s["outcomes"].items())),
           f"- interrupted: {s['interrupted']}", ""]
    causes = s["root_causes"]
    open_causes = [c for c in causes if c.get("baseline") != "fixed"]
    out += [f"## Root causes ({len(open_causes)}, of {len(s['signatures']) - len(s['limits'])} "
            f"upstream signature(s))", ""]
    if not causes:
        out += ["None: every invariant held (or what failed is a limit of the replay).", ""]
    for c in causes:
        out += _cause_markdown(c, run.args.out)
    out += ["## Limits of the replay (the control on the pass-through engine fails too)", ""]
    out += [f"- `{lim['signature']}` ({len(lim['scenarios'])} scenario(s)): {lim['reason']}"
            for lim in s["limits"]] or ["None."]
    ops = s["not_checked"]["operations"]
    out += ["", "## Not checked", "", f"- operations skipped: {sum(ops.values())}"]
    out += [f"  - {n}x {reason}" for reason, n in ops.items()]
    out += [f"- {line}" for line in _coverage_lines(s)]
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
            if m.get("script_error"):  # the writer failed: that script only, said here
                out.append(f"- script not written: {m['script_error']}")
            elif not m.get("repro"):
                out.append(f"- no standalone script: {no_script_why(m)} (the replay below "
                           f"reproduces it)")
            if m.get("repro"):
                out.append(f"- {script_status(m)}: `{m['repro']}`; run it: "
                           f"`{m['repro_command']}` (`--plain`: the same steps on plain PyTorch, "
                           f"must not reproduce)")
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
