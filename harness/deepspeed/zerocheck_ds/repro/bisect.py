"""The first bad commit of a finding: `git bisect run` over a DeepSpeed checkout with a repro script.

A repro script (repro_script.py) prints `REPRODUCED ...` and exits 1 when the failure shows, and
`NOT REPRODUCED ...` and exits 0 when it does not. At each commit the script runs on the checkout
as it stands (one process per rank, the checkout first on PYTHONPATH, its folder as the working
directory because DeepSpeed reads version.txt from there), and the commit is

  good (0)   every rank exited 0 and printed NOT REPRODUCED,
  bad (1)    a rank exited 1 and printed REPRODUCED,
  skip (125) anything else: DeepSpeed does not import there, the script needs an API that commit
             lacks, a rank died of a signal or hung past the timeout. Such a commit says nothing
             about the finding, so it must not be blamed or cleared.

`--find fix` asks the opposite question: the first commit where the script stops reproducing.
The words keep their meaning (bad reproduces, good does not), so there --bad is the older end and
--good the newer; each step's answer is inverted for git, whose "bad" is then the fixing commit.

Before bisecting, the two ends are checked (the bad one must reproduce, the good one must not):
a bisection between ends that do not behave as claimed names a meaningless commit. The checkout
is restored to the branch or commit it was on, whatever happens (Ctrl-C included).

    python3 -m zerocheck_ds bisect --repo DIR --good REV --bad REV --repro SCRIPT
        [--find bad|fix] [--world N] [--python PATH] [--shims DIR] [--timeout S] [--out FILE] [--json]

Exit codes: 0 the first bad (fixing) commit was found; 1 the skipped commits leave several candidates
(listed); 2 bad usage (not a git checkout, local changes, a bisection already under way, ends
that do not behave as claimed); 3 the bisection itself failed.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

GOOD, BAD, SKIP = 0, 1, 125
_VERDICT_NAMES = {GOOD: "good", BAD: "bad", SKIP: "skip"}
FINDS = {"bad": "first_bad", "fix": "first_fixed"}  # --find: the result's key for the answer
_OUTPUT_TAIL = 2000


class UsageError(Exception):
    """The arguments or the checkout do not allow a bisection; the message says why."""


def classify(returncodes, outputs):
    """Returns (GOOD, BAD or SKIP, the reason) for one run of a repro script on every rank."""
    if any(code == 1 and "\nREPRODUCED" in "\n" + out for code, out in zip(returncodes, outputs)):
        return BAD, "reproduced"
    if all(code == 0 and "NOT REPRODUCED" in out for code, out in zip(returncodes, outputs)):
        return GOOD, "not reproduced"
    for rank, (code, out) in enumerate(zip(returncodes, outputs)):
        if code is None:
            return SKIP, f"rank {rank} did not finish within the timeout"
        if code < 0:
            return SKIP, f"rank {rank} died of signal {-code}"
        if code != 0 or "NOT REPRODUCED" not in out:
            last = next((line for line in reversed(out.strip().splitlines()) if line.strip()), "")
            return SKIP, f"rank {rank} exited {code} without a verdict: {last[:200]}"
    return SKIP, "no verdict"  # unreachable: some rank differs from the all-good case


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _environment(repo, shims, rank, world, port):
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": os.pathsep.join(p for p in (repo, shims, env.get("PYTHONPATH", "")) if p),
        "PYTHONDONTWRITEBYTECODE": "1",  # the checkout stays clean for the next `git checkout`
        "DS_ACCELERATOR": env.get("DS_ACCELERATOR", "cpu"),
        "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
    })
    return env


def run_repro(repo, script, world=1, python=sys.executable, shims=None, timeout=300.0):
    """Runs `script` on the checkout `repo` with `world` ranks.

    Returns (verdict, reason, output of the first rank that decided it, tail only)."""
    port = _free_port()
    procs, files = [], []
    for rank in range(world):
        out = tempfile.TemporaryFile()
        files.append(out)
        procs.append(subprocess.Popen(
            [python, script], cwd=repo, env=_environment(repo, shims, rank, world, port),
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True))
    deadline = time.monotonic() + timeout
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(0.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            codes.append(None)
    for proc in procs:  # a hung rank and whatever it started
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    outputs = []
    for out in files:
        out.seek(0)
        outputs.append(out.read().decode("utf-8", "replace"))
        out.close()
    verdict, reason = classify(codes, outputs)
    return verdict, reason, outputs[0][-_OUTPUT_TAIL:]


def _git(repo, *args, check=True):
    result = subprocess.run(["git", "-C", repo, *args], stdin=subprocess.DEVNULL,
                            capture_output=True, text=True)
    if check and result.returncode != 0:
        raise UsageError(f"git {' '.join(args)} failed in {repo}: {result.stderr.strip()}")
    return result


def _commit(repo, rev):
    """Returns the full hash of `rev`, or raises UsageError naming it."""
    result = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if result.returncode != 0:
        raise UsageError(f"{rev!r} is not a commit of {repo}")
    return result.stdout.strip()


def _subject(repo, commit):
    return _git(repo, "log", "-1", "--format=%s", commit).stdout.strip()


def _check_checkout(repo):
    """Returns what to restore afterwards: the branch name, or the commit when detached."""
    if _git(repo, "rev-parse", "--is-inside-work-tree", check=False).stdout.strip() != "true":
        raise UsageError(f"--repo {repo}: not a git checkout")
    top = _git(repo, "rev-parse", "--show-toplevel").stdout.strip()
    if os.path.realpath(top) != os.path.realpath(repo):
        raise UsageError(f"--repo {repo}: give the checkout's top folder ({top})")
    if _git(repo, "rev-parse", "--verify", "--quiet", "refs/bisect/bad", check=False).returncode == 0:
        raise UsageError(f"--repo {repo}: a bisection is already under way there "
                         f"(`git -C {repo} bisect reset` ends it)")
    changes = _git(repo, "status", "--porcelain", "--untracked-files=no").stdout.strip()
    if changes:
        first = changes.splitlines()[0]
        raise UsageError(f"--repo {repo}: has local changes ({first} ...); commit or stash them")
    branch = _git(repo, "symbolic-ref", "--quiet", "--short", "HEAD", check=False).stdout.strip()
    return branch or _git(repo, "rev-parse", "HEAD").stdout.strip()


def _ancestor(repo, older, newer):
    return _git(repo, "merge-base", "--is-ancestor", older, newer, check=False).returncode == 0


def bisect(repo, good, bad, repro, world=1, python=sys.executable, shims=None, timeout=300.0,
           progress=None, find="bad"):
    """Returns the result of bisecting `repo` between `good` and `bad` with `repro` (a dict).

    `find`: "bad", the first commit that reproduces (`good` is the older end), or "fix", the
    first that no longer does (`bad` is the older end). Raises UsageError for a checkout or
    ends that do not allow it; restores the checkout."""
    if find not in FINDS:
        raise UsageError(f"--find must be one of {', '.join(FINDS)}, got {find!r}")
    say = progress or (lambda text: None)
    repo = os.path.abspath(repo)
    original = _check_checkout(repo)
    good_commit, bad_commit = _commit(repo, good), _commit(repo, bad)
    (old_name, old), (new_name, new) = (
        (("good", good_commit), ("bad", bad_commit)) if find == "bad"
        else (("bad", bad_commit), ("good", good_commit)))
    if not _ancestor(repo, old, new):
        raise UsageError(f"--{old_name} {good if old_name == 'good' else bad} is not an ancestor "
                         f"of --{new_name} {bad if new_name == 'bad' else good}"
                         + (" (--find fix: the older end is --bad)" if find == "fix" else ""))
    work = tempfile.mkdtemp(prefix="zerocheck-bisect-")
    script = os.path.join(work, os.path.basename(repro))
    shutil.copy(repro, script)  # outside the checkout, so no checkout changes it
    log = os.path.join(work, "steps.jsonl")
    step_command = [sys.executable, "-m", "zerocheck_ds", "bisect-step", "--repo", repo,
                    "--repro", script, "--world", str(world), "--python", python,
                    "--timeout", str(timeout), "--log", log] + (["--shims", shims] if shims else [])
    if find == "fix":
        step_command.append("--invert")
    try:
        for rev, commit, expected in ((bad, bad_commit, BAD), (good, good_commit, GOOD)):
            _git(repo, "checkout", "--quiet", "--detach", commit)
            say(f"checking the {_VERDICT_NAMES[expected]} end {commit[:12]} {_subject(repo, commit)}")
            verdict, reason, output = run_repro(repo, script, world, python, shims, timeout)
            if verdict != expected:
                raise UsageError(
                    f"--{_VERDICT_NAMES[expected]} {rev} ({commit[:12]}) should be "
                    f"{_VERDICT_NAMES[expected]} but the script says {_VERDICT_NAMES[verdict]} "
                    f"({reason}); its output ends:\n" + "\n".join(output.splitlines()[-8:]))
        # git's terms: its "bad" is the newer end, whatever the question.
        _git(repo, "checkout", "--quiet", "--detach", new)
        _git(repo, "bisect", "start", new, old)
        env = dict(os.environ)
        here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH", "")) if p)
        say(f"bisecting {len(_revisions(repo, old, new))} commits")
        run = subprocess.run(["git", "-C", repo, "bisect", "run", *step_command],
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env)
        steps = _read_steps(log)
        for step in steps:
            say(f"  {step['verdict']:4} {step['commit'][:12]} {step['subject']}  ({step['reason']})")
        first = None
        if _git(repo, "rev-parse", "--verify", "--quiet", "refs/bisect/bad", check=False).returncode == 0:
            first = _git(repo, "rev-parse", "refs/bisect/bad").stdout.strip()
        candidates = _candidates(run.stdout, repo)
        if run.returncode != 0 and not candidates:
            raise RuntimeError(f"git bisect run failed (exit {run.returncode}): "
                               f"{(run.stderr or run.stdout).strip()[-800:]}")
    finally:
        _git(repo, "bisect", "reset", original, check=False)
        if _git(repo, "rev-parse", "--abbrev-ref", "HEAD", check=False).stdout.strip() != original:
            _git(repo, "checkout", "--quiet", original, check=False)
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "format": "zerocheck-bisect/1", "find": find,
        "repo": repo, "good": good_commit, "bad": bad_commit, "repro": os.path.abspath(repro),
        "world_size": world, "steps": steps, "restored": original,
        "skipped": [s["commit"] for s in steps if s["verdict"] == "skip"],
    }
    if candidates:
        result.update({FINDS[find]: None, "candidates": [
            {"commit": c, "subject": _subject(repo, c)} for c in candidates]})
    else:
        result.update({FINDS[find]: first, "subject": _subject(repo, first)})
    return result


def _revisions(repo, good, bad):
    return _git(repo, "rev-list", f"{good}..{bad}").stdout.split()


def _candidates(bisect_output, repo):
    # git says "There are only 'skip'ped commits left to test. The first bad commit could be
    # any of:" followed by one hash a line.
    if "only 'skip'ped commits left" not in bisect_output:
        return []
    lines = bisect_output.split("could be any of:", 1)[-1].splitlines()
    found = []
    for line in lines:
        word = line.strip().split(" ")[0] if line.strip() else ""
        if len(word) >= 7 and all(c in "0123456789abcdef" for c in word):
            found.append(_commit(repo, word))
        elif found:
            break
    return found


def _read_steps(log):
    if not os.path.exists(log):
        return []
    with open(log, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def step_main(argv):
    """`bisect-step`: one commit of `git bisect run`; exit 0 good, 1 bad, 125 skip."""
    parser = argparse.ArgumentParser(prog="zerocheck_ds bisect-step")
    parser.add_argument("--repo", required=True)
    parser.add_argument("--repro", required=True)
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--shims")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--log", required=True)
    parser.add_argument("--invert", action="store_true",
                        help="--find fix: tell git bad when the script does not reproduce")
    args = parser.parse_args(argv)
    commit = _git(args.repo, "rev-parse", "HEAD").stdout.strip()
    started = time.monotonic()
    verdict, reason, _ = run_repro(args.repo, args.repro, args.world, args.python, args.shims,
                                   args.timeout)
    with open(args.log, "a", encoding="utf-8") as f:
        f.write(json.dumps({"commit": commit, "subject": _subject(args.repo, commit),
                            "verdict": _VERDICT_NAMES[verdict], "reason": reason,
                            "seconds": round(time.monotonic() - started, 1)}) + "\n")
    if args.invert and verdict != SKIP:
        return BAD if verdict == GOOD else GOOD
    return verdict


def _report(result):
    lines = []
    what = "first bad commit" if result["find"] == "bad" else "first fixed commit"
    if result[FINDS[result["find"]]]:
        lines.append(f"{what}: {result[FINDS[result['find']]]} {result['subject']}")
    else:
        lines.append(f"the {what} is one of these (the commits between them were "
                     "skipped: the script could not run there):")
        lines += [f"  {c['commit']} {c['subject']}" for c in result["candidates"]]
    lines.append(f"{len(result['steps'])} commit(s) tested, {len(result['skipped'])} skipped; "
                 f"{result['repo']} is back on {result['restored']}")
    return "\n".join(lines)


def main(argv):
    parser = argparse.ArgumentParser(
        prog="zerocheck upstream bisect",
        description="Finds the first commit of a DeepSpeed checkout where a repro script reproduces "
                    "(--find fix: where it stops reproducing).")
    parser.add_argument("--repo", required=True, help="a local DeepSpeed git checkout")
    parser.add_argument("--good", required=True, help="a revision that does not reproduce")
    parser.add_argument("--bad", required=True, help="a revision that reproduces (the later one "
                                                     "unless --find fix)")
    parser.add_argument("--find", choices=sorted(FINDS), default="bad",
                        help="bad: the first commit that reproduces; fix: the first that no "
                             "longer does")
    parser.add_argument("--repro", required=True, help="a repro script (OUT/repro/*.py)")
    parser.add_argument("--world", type=int, default=1, help="ranks to run the script on")
    parser.add_argument("--python", default=sys.executable, help="the Python that has torch")
    parser.add_argument("--shims", help="a folder put on PYTHONPATH after the checkout "
                                        "(../shared/deepspeed/shims for Debian's CPU torch)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per commit")
    parser.add_argument("--out", help="also write the result here (JSON)")
    parser.add_argument("--json", action="store_true", help="print only the result as JSON")
    args = parser.parse_args(argv)
    progress = None if args.json else (lambda text: print(text, file=sys.stderr, flush=True))
    try:
        if not os.path.isfile(args.repro):
            raise UsageError(f"--repro {args.repro}: no such file")
        if not 1 <= args.world <= 8:
            raise UsageError(f"--world {args.world} is outside 1..8")
        result = bisect(args.repo, args.good, args.bad, args.repro, args.world, args.python,
                        args.shims, args.timeout, progress, args.find)
    except UsageError as e:
        print(f"zerocheck upstream bisect: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # the tool itself failed: not a verdict about DeepSpeed
        print(f"zerocheck upstream bisect: internal error: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 3
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    print(json.dumps(result, indent=2) if args.json else _report(result), flush=True)
    return 0 if result[FINDS[args.find]] else 1
