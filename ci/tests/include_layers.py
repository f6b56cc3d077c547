#!/usr/bin/env python3
"""Every #include follows a declared dependency: the layers are the CMake targets' DEPS.

usage: include_layers.py TARGETS_JSON SOURCE_DIR

TARGETS_JSON is what cmake/zerocheck_targets.cmake records (zerocheck_write_targets): every
library, test and executable with its folder, sources and dependencies. A file belongs to the
target that lists it as a source; a header to the library whose sources include the same stem in
its folder, else to the library with the longest folder holding it; a file under a `tests/`
folder no library lists belongs to that folder's tests. A file may include its own target's files,
the files of the libraries its target depends on (directly or not), and headers of its own tests
folder. Anything else is an include that runs against the layers: the check prints it as
FILE:LINE with both targets and fails. It also fails when the libraries' dependencies form a
cycle, and prints the layers (levels) when all is well.
"""
import json
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
ROOTS = ("engine", "harness", "fuzz", "properties")
SUFFIXES = (".h", ".cc")


def main(targets_json, source_dir):
    with open(targets_json) as f:
        targets = {t["name"]: t for t in json.load(f)["targets"]}
    libraries = {name: t for name, t in targets.items() if t["kind"] == "library"}

    def deps_of(name):
        return [d for d in targets[name]["deps"] if d in libraries]

    # Levels: a library stands one above the highest library it depends on; a cycle has none.
    levels, visiting = {}, set()

    def level(name):
        if name in levels:
            return levels[name]
        if name in visiting:
            raise SystemExit(f"include_layers: the libraries depend on each other in a cycle through {name}")
        visiting.add(name)
        levels[name] = 1 + max((level(d) for d in deps_of(name)), default=0)
        visiting.discard(name)
        return levels[name]

    for name in libraries:
        level(name)

    closure = {}

    def reachable(name):
        if name not in closure:
            found = set()
            for d in deps_of(name):
                found |= {d} | reachable(d)
            closure[name] = found
        return closure[name]

    source_owner = {src: name for name, t in targets.items() for src in t["sources"]}
    stems = {}
    for name, t in libraries.items():
        for src in t["sources"]:
            stems[os.path.splitext(src)[0]] = name

    def tests_folder(path):
        parts = path.split("/")
        return "/".join(parts[: parts.index("tests") + 1]) if "tests" in parts[:-1] else None

    def owner(path):
        """The target (or 'tests of FOLDER') a file belongs to, or None."""
        if path in source_owner:
            return source_owner[path]
        if os.path.splitext(path)[0] in stems:
            return stems[os.path.splitext(path)[0]]
        folder = tests_folder(path)
        if folder is not None:
            return "tests of " + folder
        best = None
        for name, t in libraries.items():
            prefix = t["folder"] + "/"
            if path.startswith(prefix) and (best is None or len(prefix) > len(libraries[best]["folder"]) + 1):
                best = name
        return best

    def allowed(includer_owner, includer, included_owner, included):
        if included_owner == includer_owner:
            return True
        if included_owner is None:
            return True  # a file of no target: generated, or outside the checked folders
        if included_owner.startswith("tests of "):
            return tests_folder(includer) == included_owner[len("tests of "):]
        if includer_owner is None:
            return True
        if includer_owner.startswith("tests of "):
            folder = includer_owner[len("tests of "):]
            # A test helper header may use what the tests of its folder link.
            deps = set()
            for name, t in targets.items():
                if t["kind"] == "test" and t["folder"] == folder:
                    for d in deps_of(name):
                        deps |= {d} | reachable(d)
            return included_owner in deps
        return included_owner in reachable(includer_owner) or included_owner in deps_of(includer_owner)

    def layers_of(name):
        return ", ".join(sorted(reachable(name))) or "nothing"

    files, problems = 0, []
    for root in ROOTS:
        for directory, subdirs, names in os.walk(os.path.join(source_dir, root)):
            subdirs[:] = [d for d in subdirs if d not in ("deepspeed", "corpus", "regressions", "__pycache__")]
            for file_name in sorted(names):
                if not file_name.endswith(SUFFIXES):
                    continue
                path = os.path.relpath(os.path.join(directory, file_name), source_dir)
                files += 1
                mine = owner(path)
                with open(os.path.join(source_dir, path), encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        match = INCLUDE.match(line)
                        if not match:
                            continue
                        written = match.group(1)
                        candidates = [written, os.path.normpath(os.path.join(os.path.dirname(path), written))]
                        target = next((c for c in candidates if os.path.isfile(os.path.join(source_dir, c))), None)
                        if target is None:
                            continue  # a system or generated header
                        theirs = owner(target)
                        if allowed(mine, path, theirs, target):
                            continue
                        where = lambda o: o if o is None or o.startswith("tests of ") else f"{o} (level {levels.get(o, '-')})"
                        hint = layers_of(mine) if mine in targets and not mine.startswith("tests of ") else "its folder's tests' links"
                        problems.append(f"{path}:{number}: includes {target} of {where(theirs)} from {where(mine)}, "
                                        f"which does not depend on it (it may include: {hint})")
    for p in problems:
        print(p)
    by_level = {}
    for name, lvl in levels.items():
        by_level.setdefault(lvl, []).append(name)
    print(f"include_layers: {files} files, {len(libraries)} libraries on {len(by_level)} levels, "
          f"{len(problems)} includes against the layers")
    for lvl in sorted(by_level):
        print(f"  level {lvl}: {', '.join(sorted(by_level[lvl]))}")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
