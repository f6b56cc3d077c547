"""Helpers of the upstream ctests (upstream_suite_test.py, upstream_master_test.py): run
`zerocheck upstream`, read what it wrote, and say each check as it passes."""

import json
import os
import subprocess
import sys

SKIP = 77
CASES = 8  # + the dictionary, seed-bug and zero-size scenarios: 15 in all
# A user who placed experts by their own `ds_id`: the name DeepSpeed master counts modules under.
DS_ID_USER = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "deepspeed",
                          "tests", "fixtures", "upstream", "ds_id_experts.json")


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)
    print(f"ok: {message}")


def run(zerocheck, args, expect, env=None):
    command = [zerocheck, "upstream", *args]
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240)
    print(done.stdout[-4000:], done.stderr[-4000:], sep="\n")
    if done.returncode != expect:
        fail(f"exit code {done.returncode}, expected {expect}")
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
    return [folder, DS_ID_USER], sorted(n[:-5] for n in os.listdir(folder))
