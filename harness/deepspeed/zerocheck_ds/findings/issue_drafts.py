"""Issue drafts: OUT/issues/<root cause>.md, one per root cause, ready to paste upstream.

Each says what was run (DeepSpeed version and commit when the package says, torch, Python, world
size, ZeRO stage), what was expected and what happened, where in DeepSpeed (provenance.py), how
to reproduce it (the standalone script inline when --shrink wrote one, else the minimal or
original scenario and the replay command), the first bad commit when a bisection found it (else
the bisect command that finds it, filled in with what is known), and the upstream issues
KNOWN_UPSTREAM.md relates to it.
"""

import json
import os

from .verdict import NEW_INVARIANTS


def write_all(summary, out_dir):
    """Writes a draft per open root cause of `summary`; returns their paths."""
    folder = os.path.join(out_dir, "issues")
    written = []
    for cause in summary["root_causes"]:
        if cause.get("baseline") == "fixed":
            continue
        os.makedirs(folder, exist_ok=True)
        with open(cause["draft"], "w", encoding="utf-8") as f:
            f.write(draft(cause, summary))
        written.append(cause["draft"])
    return written


def _title(cause):
    example = cause["example"]
    where = (f" in {cause['location']['file']} {cause['location']['function']}()"
             if cause["location"] else "")
    if example["invariant"] == "I1" and not example.get("exception"):
        on = "parameters" if example.get("param") else "modules"
        return (f"ZeRO-3 overwrites attributes the user set on {on} "
                f"(`{example.get('attribute')}`){where}")
    return f"{cause['signatures'][0]}{where}"


def _versions(summary, cause):
    v = summary.get("versions") or {}
    minimal = (cause.get("minimal") or {}).get("after") or {}
    shrunk = (f"; the minimal scenario below: world size {minimal['world_size']}"
              if minimal.get("world_size") not in (None, summary["world_size"]) else "")
    engine = v.get("engine") or summary.get("adapter_version") or "unknown"
    commit = f" (commit {v['commit']})" if v.get("commit") else ""
    tree = f", source tree {summary['deepspeed_tree']}" if summary.get("deepspeed_tree") else ""
    return [f"- {summary['adapter']}: {engine}{commit}{tree}",
            f"- torch {v.get('torch', 'unknown')}, Python {v.get('python', 'unknown')}",
            f"- world size {summary['world_size']} (CPU, Gloo), ZeRO stage {summary['stage']}"
            f"{shrunk}"]


def _reproduce(cause):
    minimal = cause.get("minimal")
    if minimal and minimal.get("repro") and os.path.exists(minimal["repro"]):
        with open(minimal["repro"], encoding="utf-8") as f:
            script = f.read()
        lines = [f"Run it (one process per rank): `{minimal['repro_command']}` (it prints REPRODUCED; "
                 f"with `--plain` the same steps run on plain PyTorch and must not reproduce)."]
        return lines + ["", f"The script (`{minimal['repro']}`):", "", "```python",
                        script.rstrip("\n"), "```"]
    scenario = (minimal or {}).get("scenario")
    lines = [f"Replay: `{cause['replay_command']}`"]
    if scenario and os.path.exists(scenario):
        with open(scenario, encoding="utf-8") as f:
            text = json.dumps(json.load(f), indent=1)
        lines += ["", f"The minimal scenario (`{scenario}`, format: zerocheck "
                      f"harness/SCENARIO_FORMAT.md):", "", "```json", text, "```"]
    return lines


def _first_bad(cause, summary):
    """The first bad commit when a bisection found it; else the command that finds it, with the
    revision that showed the finding as --bad and the script as --repro."""
    if cause.get("first_bad_commit"):
        return [cause["first_bad_commit"]]
    script = (cause.get("minimal") or {}).get("repro")
    if not script:
        return ["Not bisected, and no standalone script to bisect with (run the suite with "
                "--shrink to write one)."]
    v = summary.get("versions") or {}
    version = str(v.get("engine") or summary.get("adapter_version") or "")
    bad = v.get("commit") or (f"v{version}" if version[:1].isdigit() else "<a revision that "
                              "reproduces>")
    world = ((cause.get("minimal") or {}).get("after") or {}).get("world_size") or 1
    return ["Not bisected yet. In a DeepSpeed git checkout, with a release that does not reproduce "
            "as --good (the script must print NOT REPRODUCED there):", "", "```sh",
            f"zerocheck upstream bisect --repo <DeepSpeed checkout> --good <rev> --bad {bad} "
            f"--repro {script}" + (f" --world {world}" if world > 1 else ""), "```"]


def draft(cause, summary):
    example = cause["example"]
    lines = [f"# {_title(cause)}", "", "## Environment", ""] + _versions(summary, cause)
    lines += ["", "## Expected and actual", ""]
    if example.get("expected") is not None or example.get("actual") is not None:
        lines += [f"- expected: `{json.dumps(example.get('expected'), default=str)}`",
                  f"- actual: `{json.dumps(example.get('actual'), default=str)}`"]
    lines += [f"- {example['message']}"]
    if example.get("exception"):
        lines += ["", "```", str(example["exception"]).strip()[-3000:], "```"]
    lines += ["", "## Where", ""]
    if cause["location"]:
        loc = cause["location"]
        verb = "raises" if (example.get("origin") or {}).get("action") == "raised" else "writes"
        lines.append(f"`{loc['file']}`, `{loc['function']}()` {verb} it (line"
                     f"{'s' if len(loc['lines']) > 1 else ''} "
                     f"{', '.join(map(str, loc['lines']))}): the innermost DeepSpeed frame, "
                     f"recorded by an audit of attribute writes on the user's objects.")
        code = (example.get("origin") or {}).get("code")
        if code:
            lines += ["", "```python", f"# {loc['file']}:{example['origin']['line']}", code, "```"]
    else:
        lines.append("No DeepSpeed frame is named: " + (
            "the finding is numeric (the first operation where DeepSpeed and a dense "
            "single-copy model trained on the same numbers part)."
            if example["invariant"] in NEW_INVARIANTS
            else "the audit saw no write or raise inside the package."))
    lines += ["", "## Reproduce", ""] + _reproduce(cause)
    lines += ["", "## First bad commit", ""]
    lines += _first_bad(cause, summary)
    lines += ["", "## Related upstream issues", ""]
    triage = cause.get("triage") or {}
    lines += [f"- [#{i['number']}]({i['url']})" for i in triage.get("issues", [])] or ["None known."]
    lines += ["", "## Found by", "",
              f"zerocheck's upstream suite: {cause['count']} finding(s) in "
              f"{len(cause['scenarios'])} scenario(s), signatures:"]
    lines += [f"- `{sig}`" for sig in cause["signatures"]]
    return "\n".join(lines) + "\n"
