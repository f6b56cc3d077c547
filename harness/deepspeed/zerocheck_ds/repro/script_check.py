"""Runs a written repro script before it counts as a reproduction: on the tree, then with --plain.

A script is verified only when the run on the tree prints `REPRODUCED <signature>` and exits 1,
and the run with --plain (the same steps on plain PyTorch) prints `NOT REPRODUCED <signature>` and
exits 0 on every rank. Scripts are written from the replay's rules, not by the replay itself: a
script can miss a scenario field, or reproduce on plain PyTorch too; what is published must have
been seen to work. Each rank runs as the suite's ranks run (its interpreter, the tree's
environment, the tree's folder as the working directory: DeepSpeed reads version.txt there), at
the minimal scenario's world size, within a time limit.
"""

import os
import re
import shutil
import socket
import subprocess
import sys

# A process still running after this many seconds beyond the scenario timeout is stopped: the
# imports of torch and DeepSpeed on a loaded machine take up to a minute.
STARTUP_SECONDS = 120
_RANK = re.compile(r"^\[rank \d+\] ")  # the prefix of each line of a run on several ranks
_VERDICT = re.compile(r"^(?:\[rank \d+\] )?(?:NOT )?REPRODUCED\b.*$", re.M)


def check_script(script, signature, world_size, environment, cwd, timeout):
    """{"tree": {"exit", "line", "ranks"}, "plain": {...}, "verified": bool, "why": None or why
    not}: `script` run on every rank of `world_size` with `environment` in `cwd`, without and
    with --plain, each run stopped after `timeout` seconds."""
    tree = _run(script, (), signature, world_size, environment, cwd, timeout)
    plain = _run(script, ("--plain",), signature, world_size, environment, cwd, timeout)
    why = (_why_not(tree, "on the tree", f"REPRODUCED {signature}", 1)
           or _why_not(plain, "with --plain", f"NOT REPRODUCED {signature}", 0))
    return {"tree": tree, "plain": plain, "verified": why is None, "why": why}


def _why_not(run, where, wanted, code):
    """Why `run` is not the verdict line `wanted` with exit `code`, or None when it is."""
    if run.get("timed_out"):
        return f"{where}, the script did not end within {run['timed_out']:g} s"
    if run["exit"] != code or not _RANK.sub("", run["line"] or "").startswith(wanted):
        said = f"printed {run['line']!r}" if run["line"] else "printed no verdict"
        error = f" ({run['error']})" if run.get("error") else ""
        verdict = "NOT REPRODUCED" if wanted.startswith("NOT ") else "REPRODUCED"
        return f"{where}, the script exited {run['exit']} and {said}{error}, not {verdict}"
    return None


def _run(script, arguments, signature, world_size, environment, cwd, timeout):
    """One run of the script on every rank: {"exit", "line", "ranks"}, plus "timed_out" (the
    limit) or "error" (the last line of a failing rank's stderr) where there is one. `exit` is 1
    where a rank reproduced and none failed otherwise, else the first rank's exit that is not 0,
    else 0; `line` is that rank's verdict line."""
    env = dict(os.environ, **environment)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    if world_size > 1:
        env.update(WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(_free_port()))
    made_checkpoints = cwd is not None and not os.path.exists(os.path.join(cwd, "checkpoints"))
    procs = [subprocess.Popen([sys.executable, script, *arguments], cwd=cwd, text=True,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE,
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)) if world_size > 1
                              else env)
             for r in range(world_size)]
    results, timed_out = [], False
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            for other in procs:
                other.kill()
            out, err = proc.communicate()
        results.append((proc.returncode, out, err))
    if made_checkpoints:  # a twin script's saves, in the tree's folder
        shutil.rmtree(os.path.join(cwd, "checkpoints"), ignore_errors=True)
    ranks = [code for code, _, _ in results]
    chosen = next((r for r, (code, _, _) in enumerate(results) if code not in (0, 1)), None)
    if chosen is None:
        chosen = next((r for r, (code, _, _) in enumerate(results) if code == 1), 0)
    code, out, err = results[chosen]
    run = {"exit": code, "line": verdict_line(out, signature), "ranks": ranks}
    if timed_out:
        run["timed_out"] = timeout
    elif (code not in (0, 1) or run["line"] is None) and err.strip():  # a traceback exits 1 too
        run["error"] = err.strip().splitlines()[-1][-300:]
    return run


def verdict_line(stdout, signature):
    """The script's last verdict line: from the start of the line where `REPRODUCED <signature>`
    (or NOT REPRODUCED) last begins to the end of the line where the signature ends (a signature
    may hold a line break); else the last line that starts with a verdict; else None."""
    at = stdout.rfind("REPRODUCED " + signature)
    if at >= 0:
        start = stdout.rfind("\n", 0, at) + 1
        end = stdout.find("\n", at + len("REPRODUCED " + signature))
        return stdout[start:end if end >= 0 else len(stdout)]
    found = _VERDICT.findall(stdout)
    return found[-1] if found else None


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
