#!/usr/bin/env python3
"""The suite as a package, with no C++ and no build folder (issue 43, item 5).

usage: upstream_package_test.py PYTHON DEEPSPEED_TREE WORKDIR

In a fresh virtual environment (`PYTHON -m venv --system-site-packages`: Debian's torch and
DeepSpeed's dependencies stay visible) it installs harness/deepspeed offline (`pip install
--no-build-isolation --no-index`, from a copy of the folder, so the checkout gets no build/), and
from an empty folder, with no PYTHONPATH, runs a few scenarios of the shipped corpus
(`--corpus builtin --only ...`) on DEEPSPEED_TREE at world 2 twice: `zerocheck-ds suite` and
`pytest --zerocheck-corpus builtin`. Both must give the verdicts the checkout's suite gives
(`python3 -m zerocheck_ds suite` with PYTHONPATH=harness/deepspeed): the same outcome and root
causes per scenario, leaving out the root causes KNOWN_UPSTREAM.md calls nondeterministic (the Gloo
all_gather race, which at world 2 on v0.14.5 may show in any run that gathers); in pytest's form PASSED (or XPASS) for ok, XFAIL for a scenario whose root
causes are all KNOWN_UPSTREAM.md rows, FAILED otherwise. Exit 77 (skipped) without the tree.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.normpath(os.path.join(HERE, os.pardir, "deepspeed"))
# A known bug (the seed bug), a clean random scenario, a clean checkpoint round trip, and two
# catalogued checkpoint bugs (load_module_only, the consolidated state dict of tied weights).
# Not expert_skipped_by_route: at world 2 it sometimes also shows the Gloo allgather race (I9),
# so its root causes differ from run to run.
ONLY = "seed-bug,random-0001,adam_save_train_load,tags_load_t1_module_only,tied_adam_save_load"
SKIP = 77


def fail(message):
    print(f"FAIL: {message}", flush=True)
    sys.exit(1)


def step(what, command, cwd, env, expect=(0, 1), timeout=600):
    print(f"$ {' '.join(command)}  (in {cwd})", flush=True)
    started = time.monotonic()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    seconds = time.monotonic() - started
    print(f"{what}: exit code {done.returncode} in {seconds:.1f} s", flush=True)
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
    if done.returncode not in expect:
        fail(f"{what}: exit code {done.returncode}, expected one of {expect}")
    return done, seconds


def nondeterministic():
    """The root causes KNOWN_UPSTREAM.md calls nondeterministic (the Gloo all_gather race's rows:
    on v0.14.5 at world 2 any scenario that gathers may show them in one run and not the next)."""
    with open(os.path.join(PACKAGE, "KNOWN_UPSTREAM.md"), encoding="utf-8") as f:
        return {line.split("`")[1] for line in f
                if line.startswith("| `") and "nondeterministic" in line}


def verdicts(out, flaky):
    """{scenario: (outcome, root causes, struck)}, the nondeterministic root causes left out (a
    scenario with only those is `ok`); `struck`: one of them showed in this run."""
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    found = {}
    for s in summary["scenarios"]:
        every = s.get("root_causes") or []
        causes = tuple(sorted(c for c in every if c not in flaky))
        outcome = "ok" if s["outcome"] == "findings" and every and not causes else s["outcome"]
        found[s["name"]] = (outcome, causes, len(causes) < len(every))
    return found


def compared(installed, reference):
    """(the scenarios whose verdicts differ, those not compared): a scenario where the race struck
    in either run is not compared, since what it changes does not stop at its own rows (I3 names
    only the first place the twin parts, so the race's hides a later I3 cause; a consolidation
    after it differs too: KNOWN_UPSTREAM.md's race rows)."""
    differ, skipped = {}, []
    for name in sorted(set(installed) | set(reference)):
        mine, theirs = installed.get(name), reference.get(name)
        if mine and theirs and (mine[2] or theirs[2]):
            skipped.append(name)
        elif (mine and mine[:2]) != (theirs and theirs[:2]):
            differ[name] = (mine, theirs)
    return differ, skipped


def known_titles():
    sys.path.insert(0, PACKAGE)
    from zerocheck_ds.findings.root_causes import known_upstream
    return set(known_upstream())


def pytest_form(outcome, causes, known):
    if outcome == "ok":  # XFAIL too: a run that met the race alone is xfail
        return {"PASSED", "XPASS", "XFAIL"}
    if outcome == "findings" and causes and all(c in known for c in causes):
        return {"XFAIL"}
    return {"FAILED"}


def main():
    python, tree, work = sys.argv[1:4]
    if not os.path.isdir(tree):
        print(f"SKIPPED: no DeepSpeed source tree at {tree}")
        return SKIP
    tree = os.path.abspath(tree)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    base_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ZEROCHECK_BIN")}
    base_env.update(PATH="/usr/bin:/bin", PYTHONDONTWRITEBYTECODE="1", DS_ACCELERATOR="cpu")

    # The checkout's suite: the reference verdicts.
    checkout_env = dict(base_env, PYTHONPATH=PACKAGE)
    reference_out = os.path.join(work, "checkout")
    step("the checkout's suite", [python, "-m", "zerocheck_ds", "suite", "--corpus", "builtin",
                                  "--only", ONLY, "--world", "2", "--deepspeed-tree", tree,
                                  "--out", reference_out], PACKAGE, checkout_env)
    flaky = nondeterministic()
    reference = verdicts(reference_out, flaky)

    # A fresh venv and an offline install from a copy of harness/deepspeed.
    source = os.path.join(work, "source")
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns(
        "__pycache__", "*.pyc", "build", "*.egg-info", "tests", "probes"))
    venv = os.path.join(work, "venv")
    step("venv", [python, "-m", "venv", "--system-site-packages", venv], work, base_env,
         expect=(0,))
    bin_dir = os.path.join(venv, "bin")
    _, install_seconds = step("pip install", [os.path.join(bin_dir, "python"), "-m", "pip",
                                              "install", "--no-build-isolation", "--no-index",
                                              "--no-deps", source], work, base_env, expect=(0,))
    env = dict(base_env, PATH=f"{bin_dir}:/usr/bin:/bin", VIRTUAL_ENV=venv)
    clean = os.path.join(work, "clean")  # no build folder, no checkout
    os.makedirs(clean)
    version, _ = step("--version", ["zerocheck-ds", "--version"], clean, env, expect=(0,))
    if not re.match(r"zerocheck-ds \S+ \(scenario schema format zerocheck-scenario/\d",
                    version.stdout):
        fail(f"--version printed {version.stdout!r}")
    where, _ = step("where", [os.path.join(bin_dir, "python"), "-c",
                              "import zerocheck_ds; print(zerocheck_ds.__file__)"], clean, env,
                    expect=(0,))
    if not where.stdout.strip().startswith(venv):
        fail(f"zerocheck_ds imported from {where.stdout.strip()}, not the venv")

    installed_out = os.path.join(work, "installed")
    _, cli_seconds = step("zerocheck-ds suite", [
        "zerocheck-ds", "suite", "--corpus", "builtin", "--only", ONLY, "--world", "2",
        "--deepspeed-tree", tree, "--out", installed_out], clean, env)
    installed = verdicts(installed_out, flaky)
    with open(os.path.join(installed_out, "summary.json"), encoding="utf-8") as f:
        untriaged = [c["title"] for c in json.load(f)["root_causes"] if not c.get("triage")]
    if untriaged:
        fail(f"installed, the suite did not find KNOWN_UPSTREAM.md: untriaged {untriaged}")
    differ, skipped = compared(installed, reference)
    if differ:
        fail(f"the installed suite's verdicts differ from the checkout's (installed, checkout): "
             f"{differ}")
    if skipped:
        print(f"not compared, the Gloo race struck in one of the two runs: {skipped}")
    if len(skipped) > len(reference) // 2:  # ~1 run in 20 meets it: so many say something else
        fail(f"only {len(reference) - len(skipped)} of {len(reference)} scenarios compared")

    done, pytest_seconds = step("pytest", [
        os.path.join(bin_dir, "python"), "-m", "pytest", "-p", "no:cacheprovider", "-rA",
        "--rootdir", clean,
        "--zerocheck-corpus", "builtin", "--zerocheck-only", ONLY,
        "--zerocheck-deepspeed-tree", tree, "--zerocheck-out", os.path.join(work, "pytest")],
        clean, env)
    results = {}
    for line in done.stdout.splitlines():
        m = re.match(r"^(PASSED|FAILED|XFAIL|XPASS|ERROR) \S*?zerocheck::(\S+)", line)
        if m:
            results[m.group(2)] = m.group(1)
    known = known_titles()
    wrong = {name: (results.get(name), outcome, causes)
             for name, (outcome, causes, _) in reference.items()
             if results.get(name) not in pytest_form(outcome, causes, known)}
    if wrong or set(results) != set(reference):
        print(done.stdout[-8000:])
        fail(f"pytest's items do not match the checkout's verdicts: {wrong or results}")
    print(f"OK: {len(reference)} scenarios, the same verdicts three ways "
          f"({', '.join(f'{n} {results[n]}' for n in sorted(results))}); pip install "
          f"{install_seconds:.0f} s, zerocheck-ds suite {cli_seconds:.0f} s, pytest "
          f"{pytest_seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
