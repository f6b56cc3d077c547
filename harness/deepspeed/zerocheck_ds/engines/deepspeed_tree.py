"""A DeepSpeed source tree made runnable: staged copy, shims, and the environment to import it.

DeepSpeed's source links `deepspeed/accelerator`, `deepspeed/ops/op_builder` and
`deepspeed/ops/csrc` to folders beside the package. A copy that lost its symlinks (a tarball,
a read-only mount, ../shared/) holds a small text file with the link's target instead, and
`import deepspeed` then fails. The tree is copied (about 10 MB) into the run's folder with those
links restored, and imported from there with the working directory set to it (DeepSpeed reads
version.txt relative to it). The original is never written to: it may be read-only.
"""

import os
import shutil

# Where upstream keeps symlinks inside the package.
_LINKS = ("deepspeed/accelerator", "deepspeed/ops/op_builder", "deepspeed/ops/csrc")
_MAX_LINK_FILE = 256


class TreeError(Exception):
    """The folder is not a DeepSpeed source tree; the message says what is missing."""


def _restore_link(path):
    if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) > _MAX_LINK_FILE:
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        target = f.read().strip()
    if target and "\n" not in target and os.path.isdir(os.path.join(os.path.dirname(path), target)):
        os.remove(path)
        os.symlink(target, path)


def stage(tree, destination):
    """Copies the source tree to `destination` with its links restored; returns the copy."""
    tree = os.path.abspath(tree)
    if not os.path.isfile(os.path.join(tree, "deepspeed", "__init__.py")):
        raise TreeError(f"--deepspeed-tree {tree}: no deepspeed/__init__.py there (expected a "
                        f"DeepSpeed source tree such as ../shared/deepspeed/v0.14.5)")
    if os.path.exists(destination):
        shutil.rmtree(destination)
    shutil.copytree(tree, destination, symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for root, dirs, _ in os.walk(destination):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
    for link in _LINKS:
        _restore_link(os.path.join(destination, link))
    return destination


def default_shims(tree):
    """The shims folder beside a shared tree (../shared/deepspeed/shims), or None."""
    shims = os.path.join(os.path.dirname(os.path.abspath(tree)), "shims")
    return shims if os.path.isfile(os.path.join(shims, "sitecustomize.py")) else None


def environment(staged, shims):
    """The variables that make `import deepspeed` find the staged tree on Debian's CPU torch."""
    paths = [p for p in (staged, shims) if p]
    return {
        "PYTHONPATH": os.pathsep.join(paths),
        "DS_ACCELERATOR": "cpu",
        "PYTHONDONTWRITEBYTECODE": "1",
        # Debian's torch 2.6 is built without libuv; 1.13 ignores the variable.
        "USE_LIBUV": "0",
    }
