"""Shared test helpers: fixture paths and running the command line as a subprocess."""

import json
import os
import socket
import subprocess
import sys

TESTS = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(TESTS)  # harness/deepspeed: holds zerocheck_ds/
FIXTURES = os.path.join(TESTS, "fixtures")
GOOD = os.path.join(FIXTURES, "good")
# The malformed scenarios both readers (C++ and this package) must refuse with the same line.
MALFORMED = os.path.join(os.path.dirname(PACKAGE_ROOT), "tests", "scenarios",
                         "malformed")
UPSTREAM = os.path.join(FIXTURES, "upstream")
STUB_DEEPSPEED = os.path.join(FIXTURES, "stub_deepspeed")
BROKEN_DEEPSPEED = os.path.join(FIXTURES, "broken_deepspeed")

if PACKAGE_ROOT not in sys.path:
    sys.path.insert(0, PACKAGE_ROOT)

_DISTRIBUTED_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def good(name):
    return os.path.join(GOOD, name + ".json")


def malformed_expectations():
    """Returns {file name: {"path", "message" or "message_prefix"}} of the shared fixtures."""
    with open(os.path.join(MALFORMED, "EXPECTED.json"), encoding="utf-8") as f:
        return json.load(f)


def expected_line(row):
    """Returns (the "path: message" line or its start, whether it is only a prefix)."""
    if "message" in row:
        return f"{row['path']}: {row['message']}", False
    return f"{row['path']}: {row['message_prefix']}", True


def cli_env(extra_paths=(), **variables):
    """Returns an environment for the CLI: this package importable, no inherited world."""
    env = {k: v for k, v in os.environ.items() if k not in _DISTRIBUTED_VARS}
    env.pop("ZEROCHECK_STUB_DEEPSPEED_FAIL", None)
    env["PYTHONPATH"] = os.pathsep.join(list(extra_paths) + [PACKAGE_ROOT])
    env.update(variables)
    return env


def run_cli(args, extra_paths=(), timeout=120, **variables):
    """Runs `python -m zerocheck_ds ARGS`; returns the CompletedProcess (text output)."""
    return subprocess.run([sys.executable, "-m", "zerocheck_ds", *args],
                          env=cli_env(extra_paths, **variables), capture_output=True, text=True,
                          timeout=timeout, cwd=TESTS)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
