"""Helpers of the upstream ctests (upstream_suite_test.py, upstream_master_test.py): run
`zerocheck upstream`, read what it wrote, and say each check as it passes. A finding that comes
and goes is judged by its rate (upstream_rates.py), never by a replay that passes."""

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

from upstream_rates import is_nondeterministic, judge, rates_of, replayed, report

SKIP = 77
CASES = 8  # + the dictionary, seed-bug and zero-size scenarios: 15 in all
HERE = os.path.dirname(os.path.abspath(__file__))
# A user who placed experts by their own `ds_id`: the name DeepSpeed master counts modules under.
DS_ID_USER = os.path.join(HERE, os.pardir, "deepspeed", "tests", "fixtures", "upstream",
                          "ds_id_experts.json")
# An MoE whose second step routes around an expert: ZeRO-3 steps it with its old gradient (I3).
EXPERT_SKIPPED = os.path.join(HERE, "scenarios", "upstream_bugs", "expert_skipped_by_route.json")
# The stale gradient's second symptom: an expert's gradient of an earlier step added to its new
# one by a backward that accumulates (two backward calls before a step; KNOWN_UPSTREAM.md's
# partition_grads() row). Found by master's campaign (seed 50, random-0056), written by hand.
STALE_ACCUMULATED = os.path.join(HERE, "scenarios", "upstream_bugs", "stale_gradient_accumulated.json")
STALE_ACCUMULATED_CAUSE = ("I3 backward: the accumulated gradient partition first differs from the "
                           "dense twin: deepspeed/runtime/zero/stage3.py partition_grads()")
# Scenarios both twins agree on (twin_cross_check): plain training, for the stage 1 and 2 runs.
TWIN_SCENARIOS = os.path.join(HERE, "scenarios", "twin")
# One on which zerocheck's engine and DeepSpeed's rules coincide (twin_cross_check shows the C++
# engine's bits under both): DeepSpeed equal to the twin here holds our engine's parameters.
ENGINE_ALIKE = os.path.join(TWIN_SCENARIOS, "mlp_sgd_world2.json")
# The scenarios both ctests replay beside the export's, and their names (one list).
EXTRA_FILES = [DS_ID_USER, EXPERT_SKIPPED, ENGINE_ALIKE, STALE_ACCUMULATED]
EXTRA = [os.path.basename(f)[:-len(".json")] for f in EXTRA_FILES]
KNOWN = os.path.join(HERE, os.pardir, "deepspeed", "KNOWN_UPSTREAM.md")
DS_PACKAGE = os.path.join(HERE, os.pardir, "deepspeed")  # holds zerocheck_ds
NEW_INVARIANTS = ("I3", "I4", "I6", "I9")


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)
    print(f"ok: {message}")


def arguments():
    """(ZEROCHECK, PYTHON, TREE, WORKDIR) from the command line, or None when TREE is absent (the
    test is then skipped: exit SKIP). WORKDIR is emptied."""
    zerocheck, python, tree, work = sys.argv[1:5]
    if not os.path.isdir(tree):
        print(f"SKIPPED: no DeepSpeed source tree at {tree}")
        return None
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    return zerocheck, python, tree, work


def version_of(tree):
    """"v0.14" for ../shared/deepspeed/v0.14.5, "master" for a later tree."""
    with open(os.path.join(tree, "version.txt"), encoding="utf-8") as f:
        return "v0.14" if f.read().startswith("0.14") else "master"


def torch_2(python):
    major = subprocess.run([python, "-c", "import torch; print(torch.__version__.split('.')[0])"],
                           capture_output=True, text=True).stdout.strip()
    if major in ("0", "1"):
        print(f"SKIPPED: DeepSpeed master needs torch >= 2; {python} has torch {major}.x")
        return False
    return True


def versioned_arguments():
    """arguments() and the tree's version ("v0.14" or "master"), or None when the test is
    skipped: no tree, or master with a Python whose torch is older than 2."""
    args = arguments()
    if args is None:
        return None
    version = version_of(args[2])
    if version == "master" and not torch_2(args[1]):
        return None
    return (*args, version)


def run(zerocheck, args, expect, env=None, timeout=240):
    command = [zerocheck, "upstream", *args]
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    print(done.stdout[-4000:], done.stderr[-4000:], sep="\n")
    if done.returncode != expect and not (expect is None and done.returncode in (0, 1)):
        fail(f"exit code {done.returncode}, expected {expect if expect is not None else '0 or 1'}")
    return done


def read(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def verdicts(out):
    folder = os.path.join(out, "verdicts")
    return {name[: -len(".verdict.json")]: read(os.path.join(folder, name))
            for name in os.listdir(folder) if name.endswith(".verdict.json")}


def signatures(verdict):
    return {f["signature"] for f in verdict["findings"]}



def export(zerocheck, work):
    """The fixed-seed export both ctests replay; returns (scenario paths, exported names)."""
    out = os.path.join(work, "export")
    subprocess.run([zerocheck, "export", "--cases", str(CASES), "--seed", "5", "--world", "2",
                    "--out", out], check=True)
    folder = os.path.join(out, "scenarios")
    return ([folder, *EXTRA_FILES],
            sorted(n[:-5] for n in os.listdir(folder)))


def triaged():
    """Root cause -> verdict from KNOWN_UPSTREAM.md's table (its title in backquotes)."""
    table = {}
    with open(KNOWN, encoding="utf-8") as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) >= 3 and cells[0].startswith("`"):
                table[cells[0].strip("`")] = cells[1]
    return table


def triage_rows(path=KNOWN):
    """Root cause -> its row's verdict and "seen on" cells ("VERDICT | SEEN ON"), from the tables
    of KNOWN_UPSTREAM.md headed "root cause" (columns found by their names): the text that says
    whether the row triages a nondeterministic cause (upstream_rates.is_nondeterministic)."""
    rows, columns = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not line.startswith("|"):
                columns = None
            elif cells[0] == "root cause":
                columns = (cells.index("verdict"), cells.index("seen on"))
            elif columns and cells[0].startswith("`") and len(cells) > max(columns):
                rows[cells[0].strip("`")] = " | ".join(cells[i] for i in columns)
    return rows


def scenario_files(scenarios):
    """{name: path} of the scenario files among `scenarios` (files, and the .json in folders)."""
    files = {}
    for path in scenarios:
        names = ([os.path.join(path, n) for n in sorted(os.listdir(path)) if n.endswith(".json")]
                 if os.path.isdir(path) else [path])
        files.update({os.path.basename(f)[:-len(".json")]: f for f in names})
    return files


def replayer(zerocheck, args, scenarios, work):
    """replay(names, attempt) -> the summary of one `zerocheck upstream ARGS` on those scenarios
    alone (apart from the rest of the run)."""
    files = scenario_files(scenarios)

    def replay(names, attempt):
        out = os.path.join(work, f"replay-{attempt}")
        run(zerocheck, args + ["--scenarios", *(files[n] for n in names), "--out", out],
            expect=None)
        return read(os.path.join(out, "summary.json"))
    return replay


def new_causes(summary, name):
    """The titles of the I3/I4/I6/I9 root causes `summary` lists for scenario `name`."""
    return {c["title"] for c in summary["root_causes"]
            if c.get("invariant") in NEW_INVARIANTS and name in c["scenarios"]}


def judge_new_causes(summary, rows, replay, rates_path):
    """Every I3/I4/I6/I9 root cause of `summary`, judged by its rate (upstream_rates.py): the
    scenarios showing a cause without a row, or one whose row is nondeterministic, are replayed
    (upstream_rates.replayed, through `replay`), and each of their causes must then be triaged, a
    nondeterministic one by a nondeterministic row, a deterministic one by any row but those.
    Returns (why each failing cause fails, the nondeterministic rates that passed); every rate is
    written to `rates_path`."""
    names = sorted({s for c in summary["root_causes"] if c.get("invariant") in NEW_INVARIANTS
                    for s in c["scenarios"]})
    firsts = {}
    for name in names:
        doubtful = sorted(t for t in new_causes(summary, name)
                          if t not in rows or is_nondeterministic(rows[t]))
        if doubtful:
            firsts[name] = (new_causes(summary, name), f"untriaged or nondeterministic: {doubtful}")

    def causes_again(names, attempt):
        again = replay(names, attempt)
        return {n: new_causes(again, n) for n in names}
    runs = replayed(firsts, causes_again, rows=rows)
    rates = [rate for name in sorted(runs) for rate in rates_of(name, runs[name], rows)]
    failures = [why for why in (judge(r, rows.get(r.finding), needs_row=True) for r in rates)
                if why]
    return failures, report(rates, rows, rates_path)


def check_numbers(summary, found, version, replay, work):
    """What I3, I4, I6 and I9 must show on a pristine DeepSpeed: checks made, the expert that a
    route skips stepped with its old gradient (I3), and every other I3/I4/I6/I9 root cause
    triaged, one that comes and goes (replayed with `replay` apart from the run's other
    scenarios) by a row that says it is nondeterministic.
    Returns the nondeterministic rates (upstream_rates.Rate), also in WORK/finding_rates.json."""
    checks = summary["checks"]
    alike = found["mlp_sgd_world2"]
    check(alike["outcome"] == "ok" and alike["checks"]["I3"]["checked"] >= 14
          and not alike["checks"]["I3"]["not_checked"],
          f"{version}: mlp_sgd_world2 equals the dense twin after every operation (I3: "
          f"{alike['checks']['I3']}), so it holds our engine's parameters (twin_cross_check)")
    for invariant in NEW_INVARIANTS:
        check(checks[invariant]["checked"] > 0,
              f"{invariant}: {checks[invariant]['checked']} checks made; not made: "
              f"{checks[invariant]['not_checked']}")
    skipped = found["expert_skipped_by_route"]
    check(any(f["invariant"] == "I3" and f["module_path"].startswith("1.experts.0")
              for f in skipped["findings"]),
          f"{version}: the expert a route skipped is stepped with its old gradient (I3)")
    accumulated = sorted(c["title"] for c in summary["root_causes"]
                         if "stale_gradient_accumulated" in c["scenarios"])
    check(any(t.startswith(STALE_ACCUMULATED_CAUSE) for t in accumulated) and all(
              f["module_path"].startswith("experts.1") for f in found["stale_gradient_accumulated"]["findings"]
              if f["invariant"] == "I3"),
          f"{version}: a backward that accumulates adds experts.1's gradient of the step before to its "
          f"new one (I3, located in partition_grads()): {accumulated}")
    failures, nondeterministic = judge_new_causes(summary, triage_rows(), replay,
                                                  os.path.join(work, "finding_rates.json"))
    check(not failures, f"{version}: every I3, I4, I6 and I9 root cause is triaged in "
                        f"KNOWN_UPSTREAM.md, one that comes and goes as nondeterministic "
                        f"(not: {failures})")
    return nondeterministic


def run_repro(python, script, tree, work, world, plain=False, timeout=240):
    """Runs a repro script as a maintainer would, one process per rank of `world`, with the
    DeepSpeed source `tree` importable (staged under `work`, the working directory: DeepSpeed
    reads version.txt there); returns [(exit code, output)] by rank."""
    import socket
    sys.path.insert(0, DS_PACKAGE)
    from zerocheck_ds.engines import deepspeed_tree
    staged = os.path.join(work, "deepspeed-tree")
    if not os.path.isdir(staged):
        deepspeed_tree.stage(tree, staged)
    env = dict(os.environ, **deepspeed_tree.environment(staged, deepspeed_tree.default_shims(tree)))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    procs = [subprocess.Popen([python, script] + (["--plain"] if plain else []), cwd=staged,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=dict(env, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r),
                                       MASTER_ADDR="127.0.0.1", MASTER_PORT=port))
             for r in range(world)]
    return [(p.returncode, out) for p, (out, _) in ((p, p.communicate(timeout=timeout))
                                                    for p in procs)]


@dataclass(frozen=True)
class Edit:
    """One source edit of a DeepSpeed copy: `anchor` (literal text, or a regex with `regex`)
    replaced by `replacement` in `path`; found exactly `count` times (None: at least once), or
    the copy is stale and the test fails saying so."""

    path: str
    anchor: str
    replacement: str
    regex: bool = False
    count: object = 1


def patched_tree(tree, destination, edits, label):
    """A writable copy of the DeepSpeed source `tree` at `destination` (with the shims beside it,
    where the suite looks for them) and `edits` applied; returns the copy's path."""
    shutil.rmtree(os.path.dirname(destination), ignore_errors=True)
    shutil.copytree(tree, destination)
    for root, dirs, files in os.walk(destination):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    shutil.copytree(os.path.join(os.path.dirname(os.path.abspath(tree)), "shims"),
                    os.path.join(os.path.dirname(destination), "shims"))
    for edit in edits:
        path = os.path.join(destination, edit.path)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        pattern = edit.anchor if edit.regex else re.escape(edit.anchor)
        found = len(re.findall(pattern, text))
        expected = "at least once" if edit.count is None else f"{edit.count} time(s)"
        check(found >= 1 if edit.count is None else found == edit.count,
              f"{label}: {edit.path}: the anchor {edit.anchor.strip().splitlines()[0]!r} found "
              f"{found} time(s), expected {expected}")
        patched = (re.sub(pattern, edit.replacement, text) if edit.regex
                   else text.replace(edit.anchor, edit.replacement))
        with open(path, "w", encoding="utf-8") as f:
            f.write(patched)
    return destination
