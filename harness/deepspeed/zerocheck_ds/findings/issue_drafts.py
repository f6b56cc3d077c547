"""Issue drafts: OUT/issues/<bug>.md, one per distinct bug, ready to paste upstream.

A bug is KNOWN_UPSTREAM.md's `bug` column: the root causes whose rows hold the same title are one
bug, and its one draft lists them all; an untriaged root cause is a bug of its own. A draft holds
the bug's title in plain words, what the user sees, expected and actual, the analysis (the row's
"why": one source for the catalogue and the drafts), the versions, the standalone script inline
only when the suite ran it and saw it reproduce on the tree and not with --plain (else the
minimal scenario and why there is no script), the control's result, the first bad commit only
when a bisection found one, and the related upstream issues.

A draft is for a maintainer who has neither this machine nor zerocheck: no absolute path of the
machine that wrote it and no command of ours goes in (_public rewrites the paths a traceback or
message carries).
"""

import json
import os
import platform
import re

from ..scenario import schema
from .root_causes import KNOWN_UPSTREAM
from .signatures import slug
from .verdict import NEW_INVARIANTS

_BUG_TABLE_HEAD = "| root cause |"


def bug_table(path=KNOWN_UPSTREAM):
    """{root cause title: {"bug", "why", "verdict"}} from KNOWN_UPSTREAM.md's tables whose header
    names a `bug` column (cells read by the header's names, so a column added keeps this right)."""
    table = {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return table
    header = None
    for line in lines:
        if line.startswith(_BUG_TABLE_HEAD):
            header = [c.strip() for c in line.strip().strip("|").split("|")]
            continue
        if not line.startswith("|"):
            header = None
        if not header or "bug" not in header or not line.startswith("| `"):
            continue
        cells = dict(zip(header, (c.strip() for c in line.strip().strip("|").split("|"))))
        title = cells["root cause"].strip("`")
        table[title] = {"bug": cells["bug"], "why": cells.get("why", ""),
                        "verdict": cells.get("verdict", "")}
    return table


def bug_title(cause, table, stage=3):
    """The plain title of the bug `cause` is: its KNOWN_UPSTREAM.md row's, else one made from it
    (plain_title) for a run at ZeRO `stage`."""
    row = table.get(cause["title"])
    if row and row["bug"]:
        return row["bug"]
    return plain_title(cause).replace("ZeRO-3", f"ZeRO-{stage}")


# What a finding of each invariant means to a DeepSpeed user, for an untriaged bug's title.
_PLAIN_MEANING = schema.some("invariants", {
    "I2": "ZeRO-3 moves a module the user placed by its own attributes to another rank",
    "I3": "ZeRO-3 trains to other numbers than plain PyTorch on the same data",
    "I4": "ZeRO-3 holds other partitions than it promises",
    "I5": "ZeRO-3: a repeated or refused `deepspeed.initialize` is not refused cleanly",
    "I6": "ZeRO-3: `load_checkpoint` does not restore what was saved",
    "I9": "ZeRO-3's ranks disagree on what they hold",
    "I11": "ZeRO does not handle a step whose gradients hold a NaN or inf as it promises",
})


def plain_title(cause):
    """A title in plain words for a bug no KNOWN_UPSTREAM.md row names yet: what goes wrong, at
    which operation and, where the suite located it, in which DeepSpeed function; never the
    suite's signature (a key for machines, not a sentence for a maintainer)."""
    example = cause["example"]
    invariant, op = example["invariant"], example.get("op") or "the build"
    where = (f" in `{cause['location']['function']}()`" if cause.get("location") else "")
    if invariant == "I1" and not example.get("exception"):
        on = "parameters" if example.get("param") else "modules"
        return f"ZeRO-3 overwrites attributes the user set on {on} (`{example.get('attribute')}`)"
    if example.get("exception"):
        kind = _exception_type(example["exception"]) or "an exception"
        return f"ZeRO-3: `{op}` fails with {kind}{where}"
    if invariant in ("crash", "hang"):
        return f"ZeRO-3: the process {'dies' if invariant == 'crash' else 'hangs'} in `{op}`"
    origin = example.get("origin") or {}
    if invariant == "I3" and origin.get("action") == "located":
        return (f"ZeRO-3: after a `{origin['op']}`, {origin['quantity']} differs from plain "
                f"PyTorch's on the same data (`{origin['function']}()`)")
    meaning = _PLAIN_MEANING.get(invariant, f"ZeRO-3: an invariant fails ({invariant})")
    # The field that differs tells two untriaged bugs of one invariant apart (a load's moments,
    # its values; a step counter): what the root cause is keyed by.
    actual = example.get("actual")
    field = (actual["same_as"] if isinstance(actual, dict) and actual.get("same_as")
             else example.get("attribute"))
    return f"{meaning} (at `{op}`" + (f": {field}" if field and invariant != "I5" else "") + ")"


def _exception_type(text):
    """The exception's type from a traceback or message ("AttributeError"), or None."""
    last = str(text).strip().splitlines()[-1] if str(text).strip() else ""
    match = re.match(r"([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit))\b", last.strip())
    return match.group(1).rsplit(".", 1)[-1] if match else None


def draft_path(out_dir, cause, table):
    """Where the draft of `cause`'s bug goes: named by the bug (shared by its root causes), or
    by the root cause's own id when it is untriaged."""
    row = table.get(cause["title"])
    name = slug(row["bug"]) if row and row["bug"] else cause["id"]
    return os.path.join(out_dir, "issues", f"{name}.md")


def write_all(summary, out_dir, table=None):
    """Writes one draft per open bug of `summary` (its root causes merged); returns their paths.
    A draft that cannot be written costs that draft, said in its place, never the run."""
    table = bug_table() if table is None else table
    bugs = {}  # draft path -> the root causes that are that bug, in the summary's order
    for cause in summary["root_causes"]:
        if cause.get("baseline") == "fixed":
            continue
        path = cause.get("draft") or draft_path(out_dir, cause, table)
        bugs.setdefault(path, []).append(cause)
    written = []
    for path, causes in bugs.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            text = draft(causes, summary, table)
        except Exception as error:  # one draft lost, said in its place; the run goes on
            text = (f"# {causes[0]['title']}\n\nThis draft could not be written: "
                    f"{type(error).__name__}: {_public(str(error))}\n")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        written.append(path)
    return written


_ABSOLUTE = re.compile(r"(?<![\w.:/-])/(?:[\w.+@-]+/)+[\w.+@-]*")


def _public_path(match):
    path = match.group(0)
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    at = path.rfind("/deepspeed/")
    if at >= 0:
        return path[at + 1:]
    return ".../" + os.path.basename(path.rstrip("/"))


def _public(text):
    """`text` without absolute paths: DeepSpeed's and installed packages' files by their path
    inside the package, anything else by its base name."""
    return _ABSOLUTE.sub(_public_path, str(text))


def _os_name():
    try:
        with open("/etc/os-release", encoding="utf-8") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return f"{platform.system()} {platform.release()}"


def _versions(summary, minimal):
    v = summary.get("versions") or {}
    shrunk = (f"; the reproduction below: world size {minimal['after']['world_size']}"
              if (minimal.get("after") or {}).get("world_size") not in (None, summary["world_size"])
              else "")
    engine = v.get("engine") or summary.get("adapter_version") or "unknown"
    # A commit only as the summary records it (the checkout whose top level is the tree): never
    # guessed from an enclosing repository; without git there is none, and that is no error.
    commit = f" (commit {v['commit']})" if v.get("commit") else ""
    source = " from a source tree" if summary.get("deepspeed_tree") else ""
    name = "DeepSpeed" if summary.get("adapter") == "deepspeed" else summary.get("adapter")
    return [f"- {name} {engine}{commit}{source}",
            f"- torch {v.get('torch', 'unknown')}, Python {v.get('python', 'unknown')}, "
            f"{v.get('os') or _os_name()}",
            f"- world size {summary['world_size']} (CPU, Gloo), ZeRO stage {summary['stage']}"
            f"{shrunk}"]


def _signature_entries(causes, summary):
    wanted = {s for c in causes for s in c["signatures"]}
    return [g for g in summary.get("signatures", []) if g["signature"] in wanted]


def script_verified(minimal):
    """Whether the suite ran `minimal`'s script and saw it REPRODUCED on the tree and NOT
    REPRODUCED with --plain (minimise.py's script_check): only such a script is called one."""
    return (minimal.get("script_check") or {}).get("verified") is True


def no_script_why(minimal):
    """Why the suite wrote no script for a shrunk finding (minimise.py's no_script, or the
    writer's error; older summaries have neither)."""
    if minimal.get("script_error"):
        return f"the script writer failed ({minimal['script_error']})"
    return minimal.get("no_script") or ("an I3, I4 or I9 finding outside the forms a script "
                                        "takes needs the replay's own checks")


def _minimal(causes, summary):
    """The best minimal entry among the bug's signatures: one whose script the suite verified,
    else one with a script, else any reproducible one."""
    # The bug's own signatures first (its first root cause's example first): the script shows
    # what the draft says the user sees.
    order = [sig for c in causes for sig in c["signatures"]]
    entries = [g["minimal"] for g in sorted(_signature_entries(causes, summary),
                                            key=lambda g: order.index(g["signature"]))
               if (g.get("minimal") or {}).get("reproducible")]
    entries += [c["minimal"] for c in causes if c.get("minimal")]
    for good in (script_verified,
                 lambda m: m.get("repro"), lambda m: True):
        for m in entries:
            if good(m):
                return m
    return {}


_MACHINE_PATHS = ("/work", "/tmp", "/home", "/usr", "/var", "/root", "/zerocheck")


def _unverified_why(minimal, script):
    check = minimal.get("script_check")
    if not minimal.get("repro"):
        return ("the suite wrote no standalone script for this finding: " + no_script_why(minimal)
                if minimal else "the suite wrote no standalone script for this finding: it ran "
                                "without --shrink, or the finding did not show again when its "
                                "scenario ran alone")
    if check is None:
        return "the suite did not run the script before this draft was written"
    if not check.get("verified"):
        return _public(check.get("why") or "running it did not print REPRODUCED on the tree and "
                                           "NOT REPRODUCED with --plain")
    if script is None:
        return "the script the suite verified is no longer there"
    return "the script names a path of the machine that made it"


def _run_line(name, world):
    if world > 1:
        return (f"for r in $(seq 0 {world - 1}); do DS_ACCELERATOR=cpu RANK=$r WORLD_SIZE={world} "
                f"LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 python3 {name} & done; wait")
    return f"DS_ACCELERATOR=cpu python3 {name}"


def _reproduce(causes, summary):
    minimal = _minimal(causes, summary)
    script = None
    if minimal.get("repro") and os.path.exists(minimal["repro"]):
        with open(minimal["repro"], encoding="utf-8") as f:
            script = f.read()
    verified = script_verified(minimal)
    if script is not None and script.startswith("#!"):  # the run line names python3 itself
        script = script.split("\n", 1)[1] if "\n" in script else ""
    if verified and script is not None and not any(p + "/" in script for p in _MACHINE_PATHS):
        name = os.path.basename(minimal["repro"])
        world = (minimal.get("after") or {}).get("world_size") or 1
        return [f"Save the script below as `{name}` and run it (one process per rank):", "",
                "```sh", _run_line(name, world), "```", "",
                "It prints REPRODUCED here; with `--plain` (the same steps on plain PyTorch) it "
                "prints NOT REPRODUCED. The suite ran both before writing this draft, on the CPU "
                "(`DS_ACCELERATOR=cpu`), and only there; the script puts its tensors on the "
                "engine's device, so without that variable DeepSpeed runs it on its default "
                "accelerator.", "",
                "```python", script.rstrip("\n"), "```"]
    lines = [f"No verified script: {_unverified_why(minimal, script)}."]
    scenario = minimal.get("scenario")
    if scenario and os.path.exists(scenario):
        with open(scenario, encoding="utf-8") as f:
            text = json.dumps(json.load(f), indent=1)
        lines += ["", "The minimal scenario that shows it (zerocheck's scenario format: the model, "
                      "the world size and the operations in order):", "", "```json",
                  _public(text), "```"]
    else:
        lines += ["", "Scenarios that show it: " + ", ".join(
            sorted({s for c in causes for s in c["scenarios"]})[:10]) + "."]
    return lines


def _control(causes, summary):
    controls = [g["control"] for g in _signature_entries(causes, summary) if g.get("control")]
    if not controls:
        return ["Not run: the same scenario on plain PyTorch was not replayed for this bug."]
    same = [c for c in controls if c.get("also_without_engine")]
    if same:
        return [f"The same scenario on plain PyTorch fails the same way "
                f"({len(same)} of {len(controls)} signature(s)): {_public(same[0]['reason'])}"]
    return [f"The same scenario on plain PyTorch (no DeepSpeed, the dense model) does not show "
            f"it: {len(controls)} of {len(controls)} signature(s) replayed, none seen."]


def _seen(causes):
    example = causes[0]["example"]
    lines = [f"- {_public(c['example']['message'])}" for c in causes[:3]]
    if example.get("exception"):
        lines += ["", "```", _public(str(example["exception"]).strip()[-3000:]), "```"]
    return lines


# What the suite's "dense twin" is, said once where a draft compares with it.
_TWIN_WORDS = ("the dense twin: one copy of the model, trained with plain PyTorch on every rank's "
               "micro-batch, its gradients reduced by DeepSpeed's own rules, bit for bit")


# The suite's own names for what is expected, in DeepSpeed's words.
_EXPECTED_WORDS = {"AlreadyInitialized": "refused with an error saying 'already been initialized'"}


def _expected_actual(causes):
    lines = []
    for c in causes:
        e = c["example"]
        if e.get("expected") is None and e.get("actual") is None:
            continue
        actual = e.get("actual")
        if isinstance(actual, dict) and {"expected", "actual"} <= set(actual):
            # A number that differs: the first element that does, and how many and how far.
            name = ".".join(p for p in (e.get("module_path"), e.get("param")) if p) or "the loss"
            at = f" element [{actual['first_index']}]" if "first_index" in actual else ""
            spread = (f" ({actual['differing']} of {actual['of']} elements differ; max abs "
                      f"{actual['max_abs']:.3g}, max rel {actual['max_rel']:.3g})"
                      if {"differing", "of", "max_abs", "max_rel"} <= set(actual) else "")
            lines += [f"- `{_public(c['signatures'][0])}`: `{_public(name)}`{at} after op "
                      f"{e.get('op_index')} ({e.get('op')}):",
                      f"  - expected: `{actual['expected']!r}` ({_public(e.get('expected'))})",
                      f"  - actual: `{actual['actual']!r}`{spread}"]
            continue
        expected = _EXPECTED_WORDS.get(e.get("expected"), e.get("expected"))
        lines += [f"- `{_public(c['signatures'][0])}`:",
                  f"  - expected: `{_public(json.dumps(expected, default=str))}`",
                  f"  - actual: `{_public(json.dumps(actual, default=str))}`"]
    if any("dense twin" in line for line in lines):
        lines += ["", f"(The suite compares with {_TWIN_WORDS}.)"]
    return lines or ["- No values recorded (see what the user sees above)."]


def _where(cause):
    example = cause["example"]
    loc = cause.get("location")
    origin = example.get("origin") or {}
    if not loc and origin.get("action") == "located":
        return [f"Inside the `{origin['op']}`, the first quantity where DeepSpeed and the dense "
                f"twin part is {origin['quantity']}, produced by `{origin['file']}`, "
                f"`{origin['function']}()` (the suite compares the operation's quantities in "
                f"the order DeepSpeed computes them)."]
    if not loc:
        return ["No DeepSpeed frame is named: " + (
            "the finding is numeric (the first operation where DeepSpeed and a dense "
            "single-copy model trained on the same numbers part)."
            if example["invariant"] in NEW_INVARIANTS
            else "the audit saw no write or raise inside the package.")]
    verb, seen = {"raised": ("raises it", "the exception's traceback"),
                  "registered": ("registers the hook", "an audit of hook registrations on the "
                                                       "user's modules")}.get(
        origin.get("action"), ("writes it", "an audit of attribute writes on the user's objects"))
    lines = [f"`{loc['file']}`, `{loc['function']}()` {verb} (line"
             f"{'s' if len(loc['lines']) > 1 else ''} {', '.join(map(str, loc['lines']))}): the "
             f"innermost DeepSpeed frame, from {seen}."]
    code = (example.get("origin") or {}).get("code")
    if code:
        lines += ["", "```python", f"# {loc['file']}:{example['origin']['line']}", code, "```"]
    return lines


def _analysis(causes, table):
    whys = []
    for c in causes:
        why = (table.get(c["title"]) or {}).get("why") or (c.get("triage") or {}).get("explanation")
        if why and why not in whys:
            whys.append(why)
    lines = []
    for why in whys:
        lines += [_public(_for_upstream(why)), ""]
    if not whys:
        lines += ["Not triaged yet (no row in the suite's triage).", ""]
    # The first root cause DeepSpeed's code was found in (one bug's causes may be seen as a
    # fingerprint change, with no frame, and as a raise, with one).
    located = next((c for c in causes if c.get("location")
                    or ((c["example"] or {}).get("origin") or {}).get("action") == "located"),
                   causes[0])
    lines += ["Where:", ""] + _where(located)
    return lines


# A sentence of the triage that points into this project (its catalogue, its tests, its
# scenario files) means nothing to a maintainer: the draft leaves it out.
_PROJECT_REFERENCE = re.compile(r"`(?:catalogue|harness|zerocheck_ds)/|\bctests?\b")
_SENTENCE_END = re.compile(r"(?<=\.)\s+(?=[A-Z`])")


def _for_upstream(why):
    """`why` (a KNOWN_UPSTREAM.md row's) without its sentences that cite this project's files."""
    kept = [s for s in _SENTENCE_END.split(why.strip()) if not _PROJECT_REFERENCE.search(s)]
    return " ".join(kept) or why


def _issues(causes):
    seen, lines = set(), []
    for c in causes:
        for i in (c.get("triage") or {}).get("issues", []):
            if i["number"] not in seen:
                seen.add(i["number"])
                lines.append(f"- [#{i['number']}]({i['url']})")
    return lines or ["None known."]


def draft(causes, summary, table=None):
    """The draft of one bug; `causes` are its root causes (a single cause is one too)."""
    if isinstance(causes, dict):
        causes = [causes]
    table = bug_table() if table is None else table
    minimal = _minimal(causes, summary)
    lines = [f"# {_public(bug_title(causes[0], table, summary.get('stage', 3)))}", "", "## What the user sees", ""] + _seen(causes)
    lines += ["", "## Expected and actual", ""] + _expected_actual(causes)
    lines += ["", "## Analysis", ""] + _analysis(causes, table)
    lines += ["", "## Environment", ""] + _versions(summary, minimal)
    lines += ["", "## Reproduce", ""] + _reproduce(causes, summary)
    lines += ["", "## Control", ""] + _control(causes, summary)
    bisected = [c["first_bad_commit"] for c in causes if c.get("first_bad_commit")]
    if bisected:  # only a bisection that ran names one
        lines += ["", "## First bad commit", "", _public(bisected[0])]
    lines += ["", "## Related upstream issues", ""] + _issues(causes)
    lines += ["", "## Root causes (one bug)", "",
              f"Found by zerocheck's upstream suite; the root causes below are this one bug:"]
    for c in causes:
        lines.append(f"- `{_public(c['title'])}`: {c['count']} finding(s) in "
                     f"{len(c['scenarios'])} scenario(s); signatures: "
                     + "; ".join(f"`{_public(s)}`" for s in c["signatures"]))
    return "\n".join(lines) + "\n"
