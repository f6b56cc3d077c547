"""The suite's `--coverage FILE`: which lines of the engine's code the replayed scenarios execute.

Every rank process traces the lines it executes in the target files (coverage_trace.py, started by
coverage_boot/sitecustomize.py through the environment `rank_environment` gives the ranks) and
saves them after each scenario. After the replay, `write` merges the ranks' files (a line counts
once it executed on any rank), counts each target file's executable lines from its code objects
(every line `co_lines` names in the module's code and every code object nested in it, as
coverage.py counts them: statements, def and class lines, decorators, not comments, blank lines
or docstring continuation lines) and writes FILE:

    {"format": "zerocheck-coverage/1", "engine": version, "package": "deepspeed",
     "files_measured": [globs], "scenarios": N, "rank_files": K,
     "total": {"executable", "executed", "fraction", "functions", "functions_entered"},
     "files": {path under the package: {"executable", "executed", "fraction", "functions",
               "functions_entered", "imported",
               "unreached": {qualified name: {"line", "lines": "120-135,140", "count",
                                              "entered", "feature"}}}},
     "features": [{"feature", "reason", "lines", "lines_in_entered_functions",
                   "functions_not_entered", "functions": ["path:qualified name", ...]}],
     "summary": [the lines printed]}

A function is "entered" when any line of its own body executed (its def line is the enclosing
scope's, run at import; "functions" counts every scope: module, class bodies, functions). Each function with unreached
lines gets the feature its name belongs to (coverage_features.py) and that feature's reason.
"""

import glob
import json
import os
import shutil
import sys

from . import coverage_features
from .coverage_trace import COVERAGE_VARIABLE

FORMAT = "zerocheck-coverage/1"
PACKAGE = "deepspeed"
DEFAULT_FILES = ("runtime/zero/*.py", "runtime/engine.py")
BOOT_FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "coverage_boot")


def ranks_folder(out):
    return os.path.join(out, "coverage-ranks")


def rank_environment(env, out, files):
    """The ranks' environment with tracing on: coverage_boot first on PYTHONPATH, the request in
    COVERAGE_VARIABLE. Empties the folder the ranks write to (an earlier run's files would count)."""
    folder = ranks_folder(out)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    traced = dict(env)
    traced["PYTHONPATH"] = os.pathsep.join(filter(None, (BOOT_FOLDER, env.get("PYTHONPATH"))))
    traced[COVERAGE_VARIABLE] = json.dumps({"folder": folder, "package": PACKAGE,
                                            "files": list(files)})
    return traced


def executable_lines(path):
    """{line: qualified name of the innermost code object holding it} for a Python file."""
    with open(path, "rb") as f:
        source = f.read()
    owners = {}

    def walk(code):
        for const in code.co_consts:
            if hasattr(const, "co_lines"):
                walk(const)
        # After the nested code: a def (or decorator) line is the enclosing scope's, which runs
        # it, so a function never called shows every line of its body unreached.
        for _, _, line in code.co_lines():
            if line:  # None: no line; 0: a module's implicit start
                owners[line] = code.co_qualname
    walk(compile(source, path, "exec", dont_inherit=True))
    return owners


def merged_lines(folder):
    """(package root or None, {path under the package: executed lines}, rank files read)."""
    roots, executed, count = set(), {}, 0
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            snapshot = json.load(f)
        count += 1
        if snapshot["package_root"]:
            roots.add(snapshot["package_root"])
        for rel, lines in snapshot["files"].items():
            executed.setdefault(rel, set()).update(lines)
    if len(roots) > 1:
        raise ValueError(f"the ranks traced different engine folders: {sorted(roots)}")
    return (roots.pop() if roots else None), executed, count


def target_files(root, files):
    """Paths under `root` of the files the globs name, sorted, whether imported or not."""
    found = set()
    for pattern in files:
        for path in glob.glob(os.path.join(root, pattern)):
            found.add(os.path.relpath(path, root).replace(os.sep, "/"))
    return sorted(found)


def line_ranges(lines):
    """"3-5,9" for [3, 4, 5, 9]: consecutive executable lines as one range."""
    lines = sorted(lines)
    parts, start = [], None
    for i, line in enumerate(lines):
        if start is None:
            start = line
        if i + 1 == len(lines) or lines[i + 1] != line + 1:
            parts.append(str(start) if start == line else f"{start}-{line}")
            start = None
    return ",".join(parts)


def file_report(rel, path, executed):
    """One file's entry of the report (see the module's docstring)."""
    owners = executable_lines(path)
    ran = executed & set(owners)
    by_function = {}
    for line, name in owners.items():
        by_function.setdefault(name, []).append(line)
    entered = {name for name, lines in by_function.items() if ran.intersection(lines)}
    unreached = {}
    for name, lines in sorted(by_function.items(), key=lambda item: min(item[1])):
        missing = sorted(set(lines) - ran)
        if missing:
            feature, _ = coverage_features.feature_of(rel, name)
            unreached[name] = {"line": min(lines), "lines": line_ranges(missing),
                               "count": len(missing), "entered": name in entered,
                               "feature": feature}
    return {"executable": len(owners), "executed": len(ran),
            "fraction": round(len(ran) / len(owners), 4) if owners else 1.0,
            "functions": len(by_function), "functions_entered": len(entered),
            "imported": bool(ran), "unreached": unreached}


def features(files):
    """The unreached lines of every file grouped by feature, most lines first."""
    groups = {}
    for rel, entry in files.items():
        for name, gap in entry["unreached"].items():
            _, reason = coverage_features.feature_of(rel, name)
            group = groups.setdefault(gap["feature"], {
                "feature": gap["feature"], "reason": reason, "lines": 0,
                "lines_in_entered_functions": 0, "functions_not_entered": 0, "functions": []})
            group["lines"] += gap["count"]
            if gap["entered"]:
                group["lines_in_entered_functions"] += gap["count"]
            else:
                group["functions_not_entered"] += 1
            group["functions"].append(f"{rel}:{name}")
    return sorted(groups.values(), key=lambda g: (-g["lines"], g["feature"]))


def build(root, executed, files, engine=None, scenarios=None, rank_files=None):
    """The report (the module's docstring) of the lines `executed` under `root`."""
    report = {"format": FORMAT, "engine": engine, "package": PACKAGE,
              "files_measured": list(files), "scenarios": scenarios, "rank_files": rank_files,
              "files": {}}
    for rel in target_files(root, files) if root else []:
        report["files"][rel] = file_report(rel, os.path.join(root, rel),
                                           executed.get(rel, set()))
    totals = {key: sum(e[key] for e in report["files"].values())
              for key in ("executable", "executed", "functions", "functions_entered")}
    totals["fraction"] = (round(totals["executed"] / totals["executable"], 4)
                          if totals["executable"] else 0.0)
    report["total"] = totals
    report["features"] = features(report["files"])
    report["summary"] = summary_lines(report)
    return report


def summary_lines(report):
    """The short human summary: the figure, per file, and the unreached lines by feature."""
    t = report["total"]
    lines = [f"coverage of {report['package']} {report['engine'] or ''} "
             f"({', '.join(report['files_measured'])}): {t['executed']} of {t['executable']} "
             f"executable lines ({100 * t['fraction']:.1f}%), {t['functions_entered']} of "
             f"{t['functions']} functions entered, {report['scenarios']} scenario(s), "
             f"{report['rank_files']} rank file(s)"]
    if not report["files"]:
        lines.append("  no rank traced the engine's files (a tracer that could not start says "
                     "why in the ranks' logs)")
    for rel, e in report["files"].items():
        lines.append(f"  {rel}: {e['executed']}/{e['executable']} ({100 * e['fraction']:.1f}%)"
                     + ("" if e["imported"] else ", never imported"))
    lines.append("  not reached, by feature (lines; in functions entered; functions never "
                 "entered):")
    for g in report["features"]:
        lines.append(f"    {g['feature']}: {g['lines']}; {g['lines_in_entered_functions']}; "
                     f"{g['functions_not_entered']} ({g['reason']})")
    return lines


def write(out, path, files, engine, scenarios, log):
    """Merges the ranks' files of the run in `out`, writes the report to `path` and logs its
    summary. Returns the report."""
    root, executed, count = merged_lines(ranks_folder(out))
    report = build(root, executed, files, engine, scenarios, count)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    for line in report["summary"]:
        log(line)
    return report


def main(argv):
    """`python3 -m zerocheck_ds.suite.coverage FILE...`: the executable lines of Python files
    (what the report counts), to check a count by hand."""
    for path in argv:
        owners = executable_lines(path)
        print(f"{path}: {len(owners)} executable lines: {line_ranges(owners)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
