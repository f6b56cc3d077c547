"""ctest `upstream_bisect` (label upstream): `zerocheck upstream bisect` finds a planted commit.

    upstream_bisect_test.py ZEROCHECK PYTHON SHARED_DEEPSPEED WORKDIR

A small git history is made from DeepSpeed's own source (v0.14.5 on torch 1.x, master on 2.x,
from SHARED_DEEPSPEED): a base, a harmless commit, a commit that breaks `import deepspeed`, its
fix, the planted bug (ZeRO-3's module numbering also writes the user's `zc_probe`), another
harmless commit, and the bug's fix. The repro script is the suite's own, generated for a user
who set `zc_probe` on a Linear. Bisecting from the base (good) to the commit after the bug
(bad) must name the planted commit, test and skip the broken one, and leave the checkout on
the branch it was on. `--find fix` from the planted commit (bad) to the last one (good) must
name the fix. Bad ends (a good end that reproduces) exit 2. Exit 77 (skipped) only when
SHARED_DEEPSPEED is missing.
"""

import json
import os
import subprocess
import sys

from upstream_support import SKIP, check, fail

HERE = os.path.dirname(os.path.abspath(__file__))
DS_PACKAGE = os.path.join(HERE, os.pardir, "deepspeed")
SCENARIO = os.path.join(DS_PACKAGE, "tests", "fixtures", "bisect", "user_probe.json")
COUNTER_LINE = "my_count"  # parameter_offload.py numbers modules: `module.<id or ds_id> = my_count`
OFFLOAD = "deepspeed/runtime/zero/parameter_offload.py"


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def edit(repo, relative, old, new):
    path = os.path.join(repo, relative)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.count(old) != 1:
        fail(f"{relative}: expected the anchor {old!r} exactly once, found {text.count(old)}")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(old, new))


def commit(repo, subject):
    git(repo, "commit", "--quiet", "-am", subject)
    return git(repo, "rev-parse", "HEAD")


def make_history(tree, repo):
    """Returns {name: commit} of the planted history (see the module's docstring)."""
    sys.path.insert(0, DS_PACKAGE)
    from zerocheck_ds.engines import deepspeed_tree
    deepspeed_tree.stage(tree, repo)
    git(repo, "init", "--quiet", "-b", "main")
    git(repo, "config", "user.email", "bisect@example.invalid")
    git(repo, "config", "user.name", "bisect test")
    git(repo, "add", "-A")
    commits = {"base": commit(repo, "base")}
    with open(os.path.join(repo, OFFLOAD), encoding="utf-8") as f:
        counter = next(line for line in f if line.strip().startswith("module.")
                       and line.strip().endswith(f"= {COUNTER_LINE}"))
    indent = counter[:len(counter) - len(counter.lstrip())]
    edit(repo, "version.txt", "\n", "\n\n")
    commits["harmless"] = commit(repo, "Harmless: a blank line in version.txt")
    broken = "raise ImportError('planted: this commit does not import')\n"
    with open(os.path.join(repo, "deepspeed/__init__.py"), encoding="utf-8") as f:
        first_import = next(line for line in f if line.startswith(("import ", "from ")))
    edit(repo, "deepspeed/__init__.py", "\n" + first_import, "\n" + broken + first_import)
    commits["broken"] = commit(repo, "Broken: deepspeed does not import")
    edit(repo, "deepspeed/__init__.py", "\n" + broken, "\n")
    commits["unbroken"] = commit(repo, "Import fixed")
    edit(repo, OFFLOAD, counter, counter + f"{indent}module.zc_probe = {COUNTER_LINE}\n")
    commits["planted"] = commit(repo, "Planted: number modules under zc_probe too")
    edit(repo, "version.txt", "\n\n", "\n\n\n")
    commits["after"] = commit(repo, "Harmless: another blank line")
    edit(repo, OFFLOAD, f"{indent}module.zc_probe = {COUNTER_LINE}\n", "")
    commits["fixed"] = commit(repo, "Fix: zc_probe is the user's")
    return commits


def repro_script(path):
    sys.path.insert(0, DS_PACKAGE)
    from zerocheck_ds.repro.repro_script import write_repro_script
    write_repro_script(SCENARIO, {
        "signature": "I1 initialize: attribute 'zc_probe' on Linear module not the user's",
        "invariant": "I1", "op_index": 0, "op": "initialize", "module_path": "0",
        "attribute": "zc_probe"}, path)


def bisect(zerocheck, python, shims, repo, script, good, bad, out, expect, find="bad"):
    command = [zerocheck, "upstream", "bisect", "--python", python, "--shims", shims,
               "--repo", repo, "--repro", script, "--good", good, "--bad", bad,
               "--timeout", "120", "--out", out, "--find", find]
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
    if done.returncode != expect:
        fail(f"exit code {done.returncode}, expected {expect}")
    return done


def main():
    zerocheck, python, shared, work = sys.argv[1:5]
    torch_major = int(subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                                     check=True, capture_output=True, text=True)
                      .stdout.split(".")[0])
    name = "v0.14.5" if torch_major < 2 else next(
        (n for n in sorted(os.listdir(shared)) if n.startswith("master-")), "master")
    tree, shims = os.path.join(shared, name), os.path.join(shared, "shims")
    if not os.path.isdir(tree):
        print(f"SKIPPED: no DeepSpeed source tree at {tree}")
        return SKIP
    subprocess.run(["rm", "-rf", work], check=True)
    os.makedirs(work)
    repo, script = os.path.join(work, "deepspeed"), os.path.join(work, "zc_probe_repro.py")
    commits = make_history(tree, repo)
    repro_script(script)
    check(True, f"history of {len(commits)} commits made from {name}")
    # The control: plain PyTorch never reproduces (the bisection shows DeepSpeed's commits do).
    plain = subprocess.run([python, script, "--plain"], capture_output=True, text=True, timeout=300)
    check(plain.returncode == 0 and plain.stdout.startswith("NOT REPRODUCED"),
          f"the script does not reproduce with --plain ({plain.returncode}: {plain.stdout[-200:]})")

    out = os.path.join(work, "result.json")
    done = bisect(zerocheck, python, shims, repo, script, commits["base"], commits["after"], out,
                  expect=0)
    result = json.load(open(out, encoding="utf-8"))
    check(result["first_bad"] == commits["planted"],
          f"the first bad commit is the planted one ({result['first_bad']})")
    check(result["subject"] == "Planted: number modules under zc_probe too", "its subject is given")
    check(commits["planted"] in done.stdout and "Planted" in done.stdout,
          "the first bad commit and its subject are printed")
    verdicts = {step["commit"]: step["verdict"] for step in result["steps"]}
    check(verdicts.get(commits["broken"]) == "skip",
          f"the commit that does not import was tested and skipped ({verdicts})")
    check(git(repo, "symbolic-ref", "--short", "HEAD") == "main"
          and git(repo, "rev-parse", "HEAD") == commits["fixed"],
          "the checkout is back on its branch")
    check(git(repo, "status", "--porcelain") == "", "the checkout is clean")
    check(subprocess.run(["git", "-C", repo, "bisect", "log"], capture_output=True).returncode != 0,
          "no bisection is left under way")

    # The opposite question: the first commit where the script stops reproducing.
    done = bisect(zerocheck, python, shims, repo, script, commits["fixed"], commits["planted"],
                  os.path.join(work, "fix.json"), expect=0, find="fix")
    result = json.load(open(os.path.join(work, "fix.json"), encoding="utf-8"))
    check(result["find"] == "fix" and result["first_fixed"] == commits["fixed"],
          f"--find fix names the fixing commit ({result.get('first_fixed')})")
    check(f"first fixed commit: {commits['fixed']} Fix: zc_probe is the user's" in done.stdout,
          "the fixing commit and its subject are printed")
    check(git(repo, "symbolic-ref", "--short", "HEAD") == "main", "the checkout is back on its branch")

    # A good end that reproduces makes the bisection meaningless: refused, checkout restored.
    done = bisect(zerocheck, python, shims, repo, script, commits["planted"], commits["after"],
                  os.path.join(work, "refused.json"), expect=2)
    check("should be good but the script says bad" in done.stderr,
          "a good end that reproduces is refused, saying so")
    check(git(repo, "rev-parse", "HEAD") == commits["fixed"]
          and git(repo, "symbolic-ref", "--short", "HEAD") == "main", "a refused bisection restores too")
    return 0


if __name__ == "__main__":
    sys.exit(main())
