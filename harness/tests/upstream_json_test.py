"""ctest `upstream_json_stdout`: `zerocheck upstream --json` prints one JSON document on stdout,
whatever the environment prints there at import.

    upstream_json_test.py ZEROCHECK PYTHON WORKDIR

A sitecustomize on PYTHONPATH prints DeepSpeed's accelerator line at every Python start (as a
CPU set-up that imports DeepSpeed from sitecustomize does), once through print() and once
straight to file descriptor 1, with PYTHONUNBUFFERED set: no buffer to catch it in. stdout must
still parse as one document of the checked schema (zerocheck_ds/findings/summary_schema.json), the
printed lines must be on stderr, and the exit code must say the faulty engine was caught (1).
"""

import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "deepspeed"))

from upstream_support import check  # noqa: E402
from zerocheck_ds.findings import summary_schema  # noqa: E402

NOISE = "Setting ds_accelerator to cpu (override)"


def main():
    zerocheck, python, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    site = os.path.join(work, "site")
    os.makedirs(site)
    with open(os.path.join(site, "sitecustomize.py"), "w", encoding="utf-8") as f:
        f.write(f"import os\nprint({NOISE!r})\nos.write(1, b'raw: ' + {NOISE!r}.encode() + b'\\n')\n")
    env = dict(os.environ, PYTHONPATH=site, PYTHONUNBUFFERED="1")
    command = [zerocheck, "upstream", "--python", python, "--adapter", "faulty", "--cases", "1",
               "--world", "2", "--inert-fraction", "1", "--json", "--out", os.path.join(work, "out")]
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240)
    print(done.stderr[-3000:])
    check(done.returncode == 1, f"exit code {done.returncode}: 1, the faulty engine was caught")
    try:
        document = json.loads(done.stdout)
    except ValueError as e:
        print(done.stdout[:2000])
        check(False, f"stdout is one JSON document ({e})")
    check(True, "stdout is one JSON document")
    tool = subprocess.run([sys.executable, "-m", "json.tool"], input=done.stdout,
                          capture_output=True, text=True)
    check(tool.returncode == 0, "`| python3 -m json.tool` succeeds")
    errors = summary_schema.errors(document)
    check(not errors, f"it conforms to the summary schema ({errors[:3]})")
    check(NOISE in done.stderr and f"raw: {NOISE}" in done.stderr,
          "what the sitecustomize printed went to stderr")
    check(any(c["title"].startswith("I1: written by zerocheck_ds/engines/adapters.py")
              for c in document["root_causes"]), "the document lists the root causes")
    # --inert-fraction reaches the suite: at 1 every scenario is chosen for I10's second replay
    # (at the default 0.25 most are "not drawn").
    i10 = document["checks"]["I10"]
    check(not any(reason.startswith("not drawn") for reason in i10["not_checked"]),
          f"--inert-fraction 1 chose every scenario for I10: {i10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
