"""Root causes: the findings of a run grouped by the upstream code responsible for them.

A signature says what a finding looks like; a root cause says where it comes from, so one
DeepSpeed habit seen through forty attribute names is one row. The key:

- I1, I2 with a writer (provenance.py): the invariant and the file and function that wrote;
- a finding with an exception (an operation raised, I5's failed initialize, a user write that
  raised): the invariant and the innermost upstream file and function that raised;
- I3: where the twin and the engine first part in a scenario. Where the adapter read the engine's
  quantities inside its backward and step (the finding's origin, oracles/inside.py), the first
  quantity that differs and the function that produced it, and for a step whether that parameter
  got a gradient in it: a wrong reduction, a wrong copy back and a stale gradient are three
  causes. Otherwise the operation and the compared quantity (value, whole copy, loss), and right
  after a step whether the parameter got a gradient in it. The scenario's later I3 findings
  (other parameters, the loss after) belong to that cause, so one wrong reduction is not one
  cause per parameter. At a load, the first restored field that differs from what the twin
  restored (the values, the fp32 master, each optimizer state field) and the load function that
  restored it, or the load itself when none changed it ("not restored by the load"): a load of
  the wrong save's values and one that restores wrong moments are two causes. A whole copy that differs where nothing inside the operation did is keyed
  by the upstream function that last wrote it too (the audit's, provenance.py): a gather read
  before it finished and a copy never refreshed are two causes;
- I4: the invariant, the operation, the rule, and the upstream function that last wrote the
  storage the rule judges (the parameter's data, or its shard): a release that kept the data and
  a gather nobody released are two causes, whatever the node kind;
- I9: the invariant, the operation, the first field the ranks disagree on, and the upstream
  function that last wrote it on each rank (a whole copy: the gather or broadcast that made it;
  a status: the code that set it; a step counter: the code that counted): the same function on
  every rank (a collective that went wrong) is one cause, different functions (a rank whose value
  came another way) another. Without the audit (`--no-audit`) or an upstream write, the field
  alone;
- I6: after a load whose shard is not what the load wrote into the parameter's gathered copy
  (the copy changed before it was published), the gather that handed the copy over; after a load
  whose values equal another known state (another save's, the one before the load), that state,
  whatever the field; a consolidated state dict and what is wrong in it (a key
  missing, a key too many, a shape, a value that differs); otherwise the field;
- a finding that follows from an earlier failure of its scenario (its `after`): that failure's
  cause. The user's forward (an operation's, or I5's after a repeated initialize) on what a
  release left joins the release's I4 cause, on what an initialize that raised midway left the
  initialize's own; a load of a save that raised, and a consolidation that raised on what that
  save left, join the save's own;
- anything else (a crash, a hang, a finding no upstream frame explains): its signature.

Lines are shown, never keyed: a cause keeps its identity across DeepSpeed commits. The stage is
part of the key when the run replaced the scenarios' stage 3, as in signatures.
"""

import os
import re

from .signatures import slug
from .verdict import DIFFERS_FROM_THE_TWIN, NEW_INVARIANTS

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # zerocheck_ds
# The checkout's table (harness/deepspeed/KNOWN_UPSTREAM.md); installed (pip install
# ./harness/deepspeed) there is none beside the package, which carries a copy of it.
KNOWN_UPSTREAM = os.path.join(os.path.dirname(_PACKAGE), "KNOWN_UPSTREAM.md")
if not os.path.exists(KNOWN_UPSTREAM):
    KNOWN_UPSTREAM = os.path.join(_PACKAGE, "corpus", "KNOWN_UPSTREAM.md")
# What a finding's `after` names (replay/training.py, replay/checkpoints.py) -> (the invariant of
# the earlier operation's finding whose cause it joins, the key when the verdict has none).
_LEFT_BY = {
    "release": ("I4", "after a release that left the model's parameters without their data"),
    "failed initialize": ("op", "after an initialize that raised and left the model's parameters "
                                "without their data"),
    "failed save": ("op", "after a save that raised"),
}
_ISSUE_LINK = re.compile(r"\[#(\d+)\]\((https://github\.com/[^)\s]+)\)")


def cause_title(finding, first_i3=None):
    """The root cause of one finding dict (with its signature) as a readable, stable key.
    `first_i3`: the first I3 finding of the same scenario, which the I3 ones belong to."""
    invariant = finding.get("invariant", "")
    origin = finding.get("origin")
    if invariant == "I3" and first_i3 is not None:
        finding = first_i3
    stage = re.search(r" \[ZeRO stage \d\]$", finding.get("signature", ""))
    suffix = stage.group(0) if stage else ""
    after = (finding.get("after") or {}).get("action")
    if not origin and after in _LEFT_BY:
        # The earlier operation's cause where the verdict has its finding (scenario_causes); this
        # key where it does not (I4 switched off, say).
        return f"{invariant} {finding.get('op') or 'build'}: {_LEFT_BY[after][1]}{suffix}"
    if origin and invariant not in NEW_INVARIANTS:
        verb = {"raised": "raised in", "registered": "hook registered by"}.get(
            origin.get("action"), "written by")
        return f"{invariant}: {verb} {origin['file']} {origin['function']}(){suffix}"
    if invariant == "I3":
        return _i3_title(finding, suffix)
    actual = finding.get("actual")
    if invariant == "I6" and origin and origin.get("action") == "published late":
        # Whatever value the late gather left (the one before the load, a mix of the ranks'
        # parts), the gather is the cause, not a load of the wrong state.
        return (f"I6 {finding.get('op') or 'build'}: the shard is not what the load wrote into "
                f"the gathered copy: {origin['file']} {origin['function']}(){suffix}")
    if invariant == "I6" and isinstance(actual, dict) and actual.get("same_as"):
        # One wrong load shows in every field it restores (values, fp32 masters, moments): what
        # the wrong state is tells one bug from another, the field does not.
        return f"I6 {finding.get('op') or 'build'}: restores {actual['same_as']}{suffix}"
    if invariant == "I6" and origin and origin.get("action") == "consolidated":
        # A consolidated state dict: what is wrong in it tells one bug from another (a module
        # missing from it, a value the consolidation took from elsewhere).
        return (f"I6 {finding.get('op') or 'build'}: {finding.get('attribute')}: "
                f"{origin['wrong']}{suffix}")
    if invariant == "I10" and origin and origin.get("action") == "raised":
        # One replay raised where the other did not: the code that raised is the cause.
        return (f"I10 {finding.get('op') or 'build'}: errors, raised in {origin['file']} "
                f"{origin['function']}(){suffix}")
    if invariant in NEW_INVARIANTS:  # I4, I6 (a field, or a consolidated state dict), I9, I10
        key = f"{invariant} {finding.get('op') or 'build'}: {finding.get('attribute')}"
        return f"{key}{_writer_words(invariant, origin)}{suffix}"
    return finding.get("signature", "")


def _writer_words(invariant, origin):
    """I4's and I9's key after the rule or field: who last wrote it ("" when nobody is known)."""
    origin = origin or {}
    if invariant == "I4" and origin.get("action") == "left":
        return f", its {origin['attribute']} last written by {origin['writer']}"
    if invariant == "I9" and origin.get("action") == "last written" and any(origin["writers"]):
        return f", last written by {_per_rank(origin['writers'])}"
    return ""


def _per_rank(writers):
    """The ranks' writers in words independent of which rank had which: one function, or each
    distinct one ("no upstream code" for a rank whose value no upstream code wrote)."""
    distinct = sorted({w or "no upstream code" for w in writers})
    if len(distinct) == 1:
        return distinct[0]
    return " on some ranks and ".join(distinct) + " on others"


def _gradient_words(origin):
    """Whether the parameter got a gradient in the step, in words ("" when unknown)."""
    got = (origin or {}).get("got_gradient")
    if got is None:
        return ""
    return (", for a parameter that got a gradient in the step" if got
            else ", for a parameter without a gradient in the step")


def _i3_title(finding, suffix):
    origin = finding.get("origin") or {}
    if origin.get("action") == "located":
        # An edit changes values, never whether a parameter got a gradient: the gradient of one
        # that got none is zero whatever was edited, so an edit says nothing of where that parts.
        edit = (" after a gathered edit" if origin.get("after_gathered_edit") and not (
            origin.get("got_gradient") is False and "gradient" in origin["quantity"]) else "")
        left = ", not restored by the load" if origin.get("restored") is False else ""
        return (f"I3 {origin['op']}: {origin['quantity']} first differs from the dense twin{edit}"
                f"{_gradient_words(origin)}{left}: {origin['file']} {origin['function']}(){suffix}")
    attribute = finding.get("attribute") or ""
    gradient = _gradient_words(origin) if attribute.startswith("value") else ""
    writer = f", last written by {origin['written_by']}" if origin.get("written_by") else ""
    return (f"I3 {finding.get('op') or 'build'}: {attribute} first differs from the dense "
            f"twin{gradient}{writer}{suffix}")


def scenario_causes(verdict):
    """[(cause title, finding)] for every finding of one verdict, in order. A finding that
    failed on what an earlier operation left (its `after`) belongs to that operation's cause
    when the verdict has it: a forward (an operation's, or I5's) on what a release left to the
    release's I4 cause (one bug, whatever torch's message for each layer), on what an initialize
    that raised left to the initialize's own, a load or consolidation after a save that raised to
    the save's own (the operation's finding there); a consolidated state dict's
    value that differs from the dense twin's on a parameter I3 found off the twin's trajectory
    at or before that save to the scenario's I3 cause (the consolidation is right: the twin
    was left behind earlier)."""
    i3 = [f for f in verdict["findings"] if f.get("invariant") == "I3"]
    first = min(i3, key=lambda f: (f.get("op_index") if f.get("op_index") is not None else -1),
                default=None)
    titles = [cause_title(f, first) for f in verdict["findings"]]
    for i, f in enumerate(verdict["findings"]):
        if _off_the_twin_before(f, i3):
            titles[i] = cause_title(first, first)
            continue
        after = f.get("after") or {}
        if f.get("origin") or after.get("action") not in _LEFT_BY:
            continue
        earlier = _LEFT_BY[after["action"]][0]
        cause = [t for t, g in zip(titles, verdict["findings"])
                 if g.get("invariant") == earlier and g.get("op_index") == after["op_index"]]
        if cause:
            titles[i] = cause[0]
    return list(zip(titles, verdict["findings"]))


def _off_the_twin_before(finding, i3):
    """Whether `finding` is a consolidation's value that differs from the dense twin's on a
    parameter that an I3 finding (of `i3`) already found off the twin at or before its op."""
    origin = finding.get("origin") or {}
    if (finding.get("invariant") != "I6" or origin.get("action") != "consolidated"
            or origin.get("wrong") != DIFFERS_FROM_THE_TWIN or finding.get("op_index") is None):
        return False
    return any(f.get("module_path") == finding.get("module_path")
               and f.get("param") == finding.get("param") and f.get("param") is not None
               and f.get("op_index") is not None and f["op_index"] <= finding["op_index"]
               for f in i3)


def group(verdicts, limits=()):
    """The run's root causes, most scenarios first: [{"id", "title", "invariant", "location",
    "signatures", "scenarios", "count", "example"}]. Findings whose signature is in `limits`
    (the control reproduced them without the engine) are left out."""
    causes = {}
    for verdict in verdicts:
        for title, finding in scenario_causes(verdict):
            if finding["signature"] in limits:
                continue
            cause = causes.setdefault(title, {
                "id": slug(title), "title": title, "invariant": finding["invariant"],
                "location": None, "signatures": [], "scenarios": [], "count": 0,
                "example": finding})
            cause["count"] += 1
            if finding["signature"] not in cause["signatures"]:
                cause["signatures"].append(finding["signature"])
            if verdict["scenario"] not in cause["scenarios"]:
                cause["scenarios"].append(verdict["scenario"])
            origin = finding.get("origin")
            if origin and finding["invariant"] not in NEW_INVARIANTS:
                location = cause["location"] or {"file": origin["file"],
                                                  "function": origin["function"], "lines": []}
                if origin["line"] not in location["lines"]:
                    location["lines"] = sorted(location["lines"] + [origin["line"]])
                cause["location"] = location
    return sorted(causes.values(), key=lambda c: (-len(c["scenarios"]), c["title"]))


def known_upstream(path=KNOWN_UPSTREAM):
    """{cause title: {"verdict", "issues": [{"number", "url"}], "explanation"}} from the table of
    KNOWN_UPSTREAM.md (`title` in backquotes in the first cell)."""
    table = {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError:
        return table
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`") and cells[0].endswith("`"):
            explanation = cells[-1]
            table[cells[0].strip("`")] = {
                "verdict": cells[1], "explanation": explanation,
                "issues": [{"number": int(n), "url": url}
                           for n, url in _ISSUE_LINK.findall(" ".join(cells[1:]))]}
    return table
