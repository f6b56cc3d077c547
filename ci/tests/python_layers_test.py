#!/usr/bin/env python3
"""python_layers.py on small package trees: a clean tree passes; an import running back up (at the
top of a file or inside a function, relative or absolute), a circle of siblings and a module no
layer holds each fail, naming the modules. Exits 0 when every case behaves."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_layers  # noqa: E402

LAYERS = '"""A package."""\nLAYERS = (("low", "the ground"), ("high", "above it"))\n'
CLEAN = {
    "__init__.py": LAYERS,
    "__main__.py": "from .high import top\n",
    "low/__init__.py": "NAMES = ('a', 'b')\n",
    "low/base.py": "import os\n",
    "low/more.py": "from . import base\nfrom .base import os\n",
    "high/__init__.py": "",
    "high/top.py": "from ..low import NAMES, base\nfrom ..low.more import os\n\n\ndef f():\n"
                   "    from . import helper\n",
    "high/helper.py": "import pkg.low.base\n",
}


def run(files):
    with tempfile.TemporaryDirectory() as root:
        package = os.path.join(root, "pkg")
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(package, rel)), exist_ok=True)
            with open(os.path.join(package, rel), "w", encoding="utf-8") as f:
                f.write(text)
        problems, _report = python_layers.check(package)
    return "\n".join(problems)


def main():
    cases = [
        ("a clean tree", {}, None),
        ("an upward import", {"low/more.py": "from ..high import top\n"},
         "low/more.py:1: low/more.py -> high/top.py runs back up: layer 1 (low) imports layer 2 (high)"),
        ("an upward import inside a function", {"low/base.py": "def f():\n    from ..high.top import f\n"},
         "low/base.py:2: low/base.py -> high/top.py runs back up"),
        ("an absolute upward import", {"low/base.py": "import pkg.high.helper\n"},
         "low/base.py:1: low/base.py -> high/helper.py runs back up"),
        ("an import of the package's face", {"low/base.py": "from .. import LAYERS\n"},
         "low/base.py -> __init__.py runs back up"),
        ("a circle of siblings", {"low/base.py": "def f():\n    from . import more\n"},
         "circle of 2 modules: low/base.py, low/more.py\n  low/base.py:2: low/base.py -> low/more.py\n"
         "  low/more.py:1: low/more.py -> low/base.py"),
        ("a module no layer holds", {"loose.py": ""}, "loose.py: no layer holds this module"),
        ("a subpackage LAYERS does not list", {"side/__init__.py": "", "side/x.py": ""},
         "side/x.py: no layer holds this module"),
    ]
    failed = 0
    for name, change, expected in cases:
        found = run({**CLEAN, **change})
        ok = (found == "") if expected is None else (expected in found)
        if not ok:
            failed += 1
            print(f"FAIL {name}: expected {expected or 'no problem'!r}, got:\n{found or '(no problem)'}")
        else:
            print(f"ok   {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
