"""The commit of a DeepSpeed tree, only when the tree is a git checkout of its own.

`git -C TREE rev-parse HEAD` walks up: a tree copied into another repository's subfolder (a
vendored copy, a source archive unpacked in a project) would name that repository's HEAD, not
DeepSpeed's. A commit is named only where the checkout's top level is the tree itself. A machine
without git, or a tree that is no checkout, has no commit to name: that is not an error.
"""

import os
import subprocess


def checkout_commit(tree, length=12):
    """The short commit (`length` hex digits) of the checkout whose top level is `tree`, or None:
    git missing, `tree` not a checkout, or inside one whose top level is elsewhere."""
    try:
        top = _git(tree, "rev-parse", "--show-toplevel")
        if top is None or not _same_folder(top, tree):
            return None
        return _git(tree, "rev-parse", f"--short={length}", "HEAD")
    except (OSError, subprocess.TimeoutExpired):  # no git (FileNotFoundError), no such tree
        return None


def _git(tree, *arguments):
    """git's one-line answer in `tree`, or None where it fails."""
    run = subprocess.run(["git", "-C", tree, *arguments], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=60)
    answer = run.stdout.strip()
    return answer if run.returncode == 0 and answer else None


def _same_folder(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)
