"""ctests `upstream_catalogue` (label upstream) and `upstream_catalogue_master` (label
upstream-master): every script of harness/deepspeed/catalogue/ run on the lane's DeepSpeed.

    upstream_catalogue_test.py ZEROCHECK PYTHON TREE WORKDIR

TREE is DeepSpeed's own source (../shared/deepspeed/v0.14.5, or master-* in the Debian 13 lane).
Each catalogue folder holds REPORT.md, its script and catalogue.json ({"bug", "reproduces_on",
"upstream", "script", "world_size"}). For each, on this lane's version:
  1. the folder is whole: the report inlines the script as it is, and names no path of a machine;
  2. the script prints REPRODUCED where catalogue.json says it reproduces on this version (else
     the test fails with "fixed upstream?": the catalogue is to be updated), and NOT REPRODUCED
     where it says it does not (else it fails saying the bug now shows there);
  3. with --plain (the same steps on plain PyTorch) it prints NOT REPRODUCED.
Each script runs once per mode: a catalogued bug reproduces every run (the Gloo race's script
makes 300 gathers, enough that it shows in every run seen), so nothing is retried.
"""

import json
import os
import re
import socket
import subprocess
import sys

from upstream_support import check, fail, run_repro, versioned_arguments

HERE = os.path.dirname(os.path.abspath(__file__))
CATALOGUE = os.path.join(HERE, os.pardir, "deepspeed", "catalogue")
FIELDS = {"bug", "reproduces_on", "upstream", "script", "world_size"}
MACHINE_PATHS = re.compile(r"(?<![\w.])/(work|tmp|home|usr|root|zerocheck)/")


def lane_version(tree):
    """The catalogue's name of the tree's version: "v0.14.5", or "master" for master-*."""
    name = os.path.basename(os.path.normpath(tree))
    return "master" if name.startswith("master") else name


def folders():
    return sorted(n for n in os.listdir(CATALOGUE)
                  if os.path.isfile(os.path.join(CATALOGUE, n, "catalogue.json")))


def entry(name):
    with open(os.path.join(CATALOGUE, name, "catalogue.json"), encoding="utf-8") as f:
        found = json.load(f)
    check(FIELDS <= set(found), f"{name}: catalogue.json has {sorted(FIELDS)}")
    return found


def check_report(name, found):
    """The report inlines the script as it is (one source for both) and names no machine path."""
    with open(os.path.join(CATALOGUE, name, "REPORT.md"), encoding="utf-8") as f:
        report = f.read()
    with open(os.path.join(CATALOGUE, name, found["script"]), encoding="utf-8") as f:
        script = f.read()
    check(f"```python\n{script.rstrip()}\n```" in report,
          f"{name}: REPORT.md inlines {found['script']} as it is")
    text = "\n".join(line for line in report.splitlines() if not line.startswith("#!"))
    check(not MACHINE_PATHS.search(text), f"{name}: REPORT.md names no path of a machine "
          f"(a script's #! line aside)")
    check(report.startswith(f"# {found['bug']}\n"), f"{name}: REPORT.md is titled by the bug")


def outcome(results):
    """"REPRODUCED", "NOT REPRODUCED" or None (the script broke) from the ranks' outputs."""
    lines = [line.strip() for _, out in results for line in out.splitlines()]
    if any(line.startswith("REPRODUCED") for line in lines):
        return "REPRODUCED"
    if all(code == 0 for code, _ in results) and any(line.startswith("NOT REPRODUCED")
                                                     for line in lines):
        return "NOT REPRODUCED"
    return None


def run_plain(python, script, work, world, timeout=240):
    """The script's --plain run, one process per rank: plain PyTorch, so without DeepSpeed's
    tree or shims on the path (nothing there to import, and a shorter start)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = dict(os.environ, DS_ACCELERATOR="cpu", PYTHONDONTWRITEBYTECODE="1", USE_LIBUV="0")
    env.pop("PYTHONPATH", None)
    procs = [subprocess.Popen([python, script, "--plain"], cwd=work, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              env=dict(env, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r),
                                       MASTER_ADDR="127.0.0.1", MASTER_PORT=port))
             for r in range(world)]
    return [(p.returncode, out) for p, (out, _) in ((p, p.communicate(timeout=timeout))
                                                    for p in procs)]


def run_script(name, found, python, tree, work, plain):
    script = os.path.join(os.path.abspath(CATALOGUE), name, found["script"])
    results = (run_plain(python, script, work, found["world_size"]) if plain else
               run_repro(python, script, tree, work, found["world_size"]))
    said = outcome(results)
    mode = " --plain" if plain else ""
    if said is None:
        fail(f"{name}{mode}: the script neither reproduced nor said NOT REPRODUCED (exit codes "
             f"{[c for c, _ in results]}):\n" + "\n".join(out[-2000:] for _, out in results))
    print(f"{name}{mode}: {said}: " + " | ".join(
        line for _, out in results for line in out.splitlines()[-3:]))
    return said


def main():
    args = versioned_arguments()
    if args is None:
        return 77
    _, python, tree, work, _ = args
    version = lane_version(tree)
    names = folders()
    check(len(names) >= 4, f"the catalogue has {len(names)} bugs (at least the four of the suite)")
    for name in names:
        found = entry(name)
        check_report(name, found)
        said = run_script(name, found, python, tree, work, plain=False)
        if version in found["reproduces_on"]:
            check(said == "REPRODUCED", f"{name}: REPRODUCED on {version}, as catalogue.json says "
                  f"(if not: fixed upstream? update the catalogue)")
        else:
            check(said == "NOT REPRODUCED", f"{name}: NOT REPRODUCED on {version}, as "
                  f"catalogue.json says (if not: it now reproduces here; update the catalogue)")
        check(run_script(name, found, python, tree, work, plain=True) == "NOT REPRODUCED",
              f"{name}: NOT REPRODUCED with --plain")
    return 0


if __name__ == "__main__":
    sys.exit(main())
