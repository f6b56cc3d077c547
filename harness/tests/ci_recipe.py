"""The command lines of the CI recipe for DeepSpeed (harness/deepspeed/ci/deepspeed-zerocheck.yml),
read from the workflow file itself, so that the test that runs them (upstream_package_test.py)
tests what the recipe says and the two cannot drift apart.

A step's commands are its `run: |` block (the only form the recipe uses: a `run:` in another form
is refused rather than skipped), one command per logical line (a line ending in a backslash goes on
with the next). Only the suite's own commands (`zerocheck-ds`, `pytest`) can run here; the lines that
install torch, DeepSpeed's requirements and the package from the network are the recipe's set-up,
which the test replaces by its offline install into a fresh virtual environment.
"""

import os
import re
import shlex

HERE = os.path.dirname(os.path.abspath(__file__))
RECIPE = os.path.normpath(os.path.join(HERE, os.pardir, "deepspeed", "ci", "deepspeed-zerocheck.yml"))
SUITE_COMMANDS = ("zerocheck-ds", "pytest")


class RecipeError(Exception):
    """The workflow file is not in the shape this reader knows: the message says where."""


def run_blocks(path=RECIPE):
    """[(step name, [logical command lines])] of every `run: |` step, in the file's order."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    blocks, name = [], None
    i = 0
    while i < len(lines):
        line = lines[i]
        named = re.match(r"^\s*-\s+name:\s*(.+?)\s*$", line)
        if named:
            name = named.group(1)
        run = re.match(r"^(\s*)(-\s+)?run:(.*)$", line)
        if run:
            if run.group(3).strip() != "|":
                raise RecipeError(f"{path}:{i + 1}: a `run:` that is not a `run: |` block")
            indent, body = None, []
            i += 1
            while i < len(lines) and (not lines[i].strip() or indent is None
                                      or lines[i].startswith(indent)):
                if lines[i].strip():
                    if indent is None:
                        indent = re.match(r"^\s*", lines[i]).group(0)
                        if len(indent) <= len(run.group(1)):
                            raise RecipeError(f"{path}:{i + 1}: an empty `run: |` block")
                    body.append(lines[i][len(indent):])
                i += 1
            blocks.append((name, _logical(body)))
            continue
        i += 1
    return blocks


def _logical(body):
    """Lines joined where one ends in a backslash (the shell's continuation)."""
    out, pending = [], ""
    for line in body:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
        else:
            out.append(" ".join((pending + line).split()) if pending else line.strip())
            pending = ""
    if pending:
        out.append(pending.strip())
    return [line for line in out if line and not line.startswith("#")]


def program(line):
    """The command a logical line runs (its first word, the shell's quoting undone)."""
    words = shlex.split(line, comments=True)
    return words[0] if words else ""


def suite_lines(path=RECIPE):
    """[(step name, line)] of the lines that run the suite's own commands, and [(step name,
    line)] of the others (the network set-up)."""
    ours, setup = [], []
    for name, block in run_blocks(path):
        for line in block:
            (ours if program(line) in SUITE_COMMANDS else setup).append((name, line))
    return ours, setup


def option(line, flag):
    """The value given to `flag` in the command of `line` (`--flag V` or `--flag=V`), or None."""
    words = shlex.split(line, comments=True)
    for i, word in enumerate(words):
        if word == flag and i + 1 < len(words):
            return words[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None
