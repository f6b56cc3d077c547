"""Shared test helpers: fixture paths and running the command line as a subprocess."""

import os
import socket
import subprocess
import sys

TESTS = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(TESTS)  # harness/deepspeed: holds zerocheck_ds/
FIXTURES = os.path.join(TESTS, "fixtures")
GOOD = os.path.join(FIXTURES, "good")
BAD = os.path.join(FIXTURES, "bad")
UPSTREAM = os.path.join(FIXTURES, "upstream")
STUB_DEEPSPEED = os.path.join(FIXTURES, "stub_deepspeed")
BROKEN_DEEPSPEED = os.path.join(FIXTURES, "broken_deepspeed")

if PACKAGE_ROOT not in sys.path:
    sys.path.insert(0, PACKAGE_ROOT)

_DISTRIBUTED_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def good(name):
    return os.path.join(GOOD, name + ".json")


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
