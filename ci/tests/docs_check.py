#!/usr/bin/env python3
"""The docs cite what exists: every repository path in comments, scripts and Markdown is there,
every count the docs state is the count of the table it counts, and every list that claims to be
complete names exactly the table's rows.

usage: docs_check.py SOURCE_DIR

Paths: a token that starts with one of the repository's top folders (engine/, harness/, docs/,
ci/, ...) and names a file or folder must exist; `../shared/...` must exist when ../shared does; a
`build/<preset>/bin/NAME` must name a target some CMakeLists.txt declares. Tokens with
placeholders (<...>, *, {...}, $) are patterns, not paths, and are skipped.

Counts, in every README.md and in docs/: "<number> invariants", "<number> planted faults" (or
"faults"), "<number> deep faults", "<number> ...targets", "<number> exit codes" and "<number>
(planted) DeepSpeed faults", against the tables of the list kinds below. A count in double
quotes is a mention, not a claim, and is skipped.

Lists: a Markdown table or bullet list right after a line holding only the marker

    <!-- list: KIND -->

claims to name every row of KIND's table and nothing else. The name of a table row (header and
`---` row skipped) or of a bullet is its first `code span`; the names must equal the table's,
and the check prints the names missing from the list and the extra ones. Every KIND must be
listed by some document (all-faults excepted: its two tables are), so a table cannot lose its
list unnoticed. The kinds and their tables:

    fuzz-targets        the zerocheck_fuzz_target(NAME ...) calls of fuzz/CMakeLists.txt
    faults              ZERO3_FAULTS (engine/faults.h), by name (legacy-0.15.4, ...)
    deep-faults         ZERO3_DEEP_FAULTS (engine/faults.h)
    all-faults          both of them
    invariants          ZEROCHECK_INVARIANTS (harness/scenario/invariants.h): I1, I2, ...
    exit-codes          ZEROCHECK_EXIT_CODES (harness/cli/command.h): 0, 1, ...
    commands            ZEROCHECK_COMMANDS (harness/cli/command.h)
    libraries           every zerocheck_library and zerocheck_executable of the CMakeLists.txt files
    python-subpackages  the subpackages (folders with __init__.py) of harness/deepspeed/zerocheck_ds
    deepspeed-faults    FAULTS of harness/tests/upstream_faults_test.py: the faults planted in
                        DeepSpeed's own code (ctest upstream_planted_faults)

Prints FILE:LINE and what is wrong for each problem; exit 1 when there is one.
"""
import os
import re
import subprocess
import sys

TOP = ("engine", "harness", "fuzz", "properties", "ci", "cmake", "docs", ".clusterfuzzlite", ".github", ".ci")
TEXT_SUFFIXES = (".md", ".h", ".cc", ".py", ".cmake", ".sh", ".txt", ".yml", ".yaml", ".toml")
PATH = re.compile(r"(?<![\w./-])((?:\.\./shared/|build/[\w-]+/bin/|(?:%s)/)[\w./+-]*[\w/])" % "|".join(
    re.escape(t) for t in TOP))
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
           "ten": 10, "eleven": 11, "twelve": 12}
NUMBER = r"(\d+|" + "|".join(NUMBERS) + r")"
MARKER = re.compile(r"^\s*<!--\s*list:\s*([\w-]+)\s*-->\s*$")
CODE_SPAN = re.compile(r"`([^`]+)`")
PYTHON_PACKAGE = "harness/deepspeed/zerocheck_ds"
DEEPSPEED_FAULTS = "harness/tests/upstream_faults_test.py"


def tracked_files(root):
    out = subprocess.run(["git", "-C", root, "ls-files", "-co", "--exclude-standard"], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit("docs_check: not a git work tree: " + root)
    return sorted(set(out.stdout.split()))


def read(root, path):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()


def number_of(word):
    return int(word) if word.isdigit() else NUMBERS[word.lower()]


def table_keys(text, macro, field):
    """The rows of an X-macro table (`X(` at the start of a continued line inside #define macro),
    each by its first argument (field 0) or its second (field 1: a string or a number)."""
    start = text.index("#define " + macro + "(X)")
    keys = []
    for line in text[start:].splitlines()[1:]:
        row = re.match(r'\s*X\(\s*(\w+)\s*,\s*(?:"([^"]*)"|(\w+))', line)
        if row:
            keys.append(row.group(1) if field == 0 else (row.group(2) if row.group(2) is not None else row.group(3)))
        if not line.rstrip().endswith("\\"):
            break
    return keys


def cmake_calls(root, files, kinds):
    names = []
    for f in files:
        if os.path.basename(f) == "CMakeLists.txt":
            names += re.findall(r"^\s*(?:%s)\(\s*([\w-]+)" % "|".join(kinds), read(root, f), re.M)
    return names


def deepspeed_faults(root):
    """The keys of the FAULTS dict of the planted-DeepSpeed-faults test, then those of its
    OVERFLOW_FAULTS (the overflow skip's faults, replayed at stage 2 on master), if any."""
    text = read(root, DEEPSPEED_FAULTS)
    body = re.search(r"^FAULTS = \{\n(.*?)^\}", text, re.M | re.S)
    if not body:
        raise SystemExit(f"docs_check: no `FAULTS = {{` table in {DEEPSPEED_FAULTS}")
    overflow = re.search(r"^OVERFLOW_FAULTS = \{\n(.*?)^\}", text, re.M | re.S)
    return [name for table in (body, overflow) if table
            for name in re.findall(r'^    "([\w.-]+)":', table.group(1), re.M)]


def python_subpackages(root, files):
    prefix = PYTHON_PACKAGE + "/"
    return sorted({f[len(prefix):].split("/")[0] for f in files
                   if f.startswith(prefix) and f.count("/") == prefix.count("/") + 1 and f.endswith("/__init__.py")
                   and os.path.exists(os.path.join(root, f))})


def the_tables(root, files):
    """KIND -> (the names its table holds, where that table is)."""
    faults_h = read(root, "engine/faults.h")
    command_h = read(root, "harness/cli/command.h")
    faults = table_keys(faults_h, "ZERO3_FAULTS", 1)
    deep = table_keys(faults_h, "ZERO3_DEEP_FAULTS", 1)
    return {
        "fuzz-targets": (re.findall(r"^zerocheck_fuzz_target\(\s*([\w-]+)", read(root, "fuzz/CMakeLists.txt"), re.M),
                         "fuzz/CMakeLists.txt's zerocheck_fuzz_target calls"),
        "faults": (faults, "ZERO3_FAULTS"),
        "deep-faults": (deep, "ZERO3_DEEP_FAULTS"),
        "all-faults": (faults + deep, "ZERO3_FAULTS and ZERO3_DEEP_FAULTS"),
        "invariants": (table_keys(read(root, "harness/scenario/invariants.h"), "ZEROCHECK_INVARIANTS", 0),
                       "ZEROCHECK_INVARIANTS"),
        "exit-codes": (table_keys(command_h, "ZEROCHECK_EXIT_CODES", 1), "ZEROCHECK_EXIT_CODES"),
        "commands": (table_keys(command_h, "ZEROCHECK_COMMANDS", 0), "ZEROCHECK_COMMANDS"),
        "libraries": (cmake_calls(root, files, ("zerocheck_library", "zerocheck_executable")),
                      "the zerocheck_library and zerocheck_executable calls"),
        "python-subpackages": (python_subpackages(root, files), f"the subpackages of {PYTHON_PACKAGE}"),
        "deepspeed-faults": (deepspeed_faults(root), f"FAULTS of {DEEPSPEED_FAULTS}"),
    }


def listed_names(lines, start):
    """The names of the table or bullet list that begins after line `start` (0-based), with the
    1-based line of each; stops at the first blank line after the list."""
    names, i = [], start + 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    first_row = True
    while i < len(lines) and lines[i].strip():
        line = lines[i].strip()
        if line.startswith("|"):
            header, first_row = first_row, False
            if not header and not re.fullmatch(r"\|[\s:|-]+\|?", line):
                span = CODE_SPAN.search(line)
                names.append((span.group(1) if span else None, i + 1))
        elif re.match(r"[-*] ", line):
            span = CODE_SPAN.search(line)
            names.append((span.group(1) if span else None, i + 1))
        i += 1
    return names


def check_lists(root, files, tables, problems):
    listed_kinds = set()
    for f in files:
        if not f.endswith(".md"):
            continue
        lines = read(root, f).splitlines()
        for number, line in enumerate(lines):
            marker = MARKER.match(line)
            if not marker:
                continue
            kind = marker.group(1)
            if kind not in tables:
                problems.append(f"{f}:{number + 1}: unknown list kind '{kind}' (known: {', '.join(sorted(tables))})")
                continue
            listed_kinds.add(kind)
            names = listed_names(lines, number)
            if not names:
                problems.append(f"{f}:{number + 1}: the list of {kind} is empty: a table or bullet list must follow")
                continue
            for name, where in names:
                if name is None:
                    problems.append(f"{f}:{where}: a row of the list of {kind} names nothing (no `code span`)")
            given = [name for name, _ in names if name is not None]
            expected, table = tables[kind]
            missing = [n for n in expected if n not in given]
            extra = [n for n in given if n not in expected]
            twice = sorted({n for n in given if given.count(n) > 1})
            if missing or extra or twice:
                what = "; ".join(part for part in (
                    "missing: " + ", ".join(missing) if missing else "",
                    "extra: " + ", ".join(extra) if extra else "",
                    "twice: " + ", ".join(twice) if twice else "") if part)
                problems.append(f"{f}:{number + 1}: the list of {kind} differs from {table} ({len(expected)} rows): {what}")
    for kind in sorted(set(tables) - listed_kinds - {"all-faults"}):  # its two tables have lists
        problems.append(f"no document lists {kind} (a `<!-- list: {kind} -->` before a table or bullet list)")


def check_counts(root, files, tables, problems):
    count = {kind: len(names) for kind, (names, _) in tables.items()}
    counted = [(r"\b" + NUMBER + r" invariants\b", "invariants"),
               (r"\b" + NUMBER + r" (?:planted )?faults\b", "faults"),
               (r"\b" + NUMBER + r" deep faults\b", "deep-faults"),
               (r"\b" + NUMBER + r" (?:coverage-guided |libFuzzer |fuzz )?targets\b", "fuzz-targets"),
               (r"\b" + NUMBER + r" exit codes\b", "exit-codes"),
               (r"\b" + NUMBER + r" (?:planted )?DeepSpeed faults\b", "deepspeed-faults")]
    for f in files:
        if os.path.basename(f) != "README.md" and not (f.startswith("docs/") and f.endswith(".md")):
            continue
        for number, line in enumerate(read(root, f).splitlines(), 1):
            for pattern, kind in counted:
                for match in re.finditer(pattern, line, re.I):
                    if line[:match.start()].endswith(('"', "\u201c")):
                        continue  # a quoted phrase is a mention ("seven invariants" as a bad example), not a claim
                    if number_of(match.group(1)) != count[kind]:
                        problems.append(f"{f}:{number}: says \"{match.group(0)}\", but {tables[kind][1]} has "
                                        f"{count[kind]}")


def check_paths(root, files, problems):
    existing = set(files)
    folders = {os.path.dirname(f) for f in files}
    for f in list(folders):
        while f:
            f = os.path.dirname(f)
            folders.add(f)
    shared = os.path.isdir(os.path.join(root, "..", "shared"))
    targets = set()
    for kind, name in re.findall(r"\b(zerocheck_executable|zerocheck_test|add_executable|zerocheck_fuzz_target)"
                                 r"\(\s*([\w-]+)", "\n".join(read(root, f) for f in files
                                                             if os.path.basename(f) == "CMakeLists.txt")):
        targets |= {"fuzz_" + name, "fuzz_" + name + "_replay_tests"} if kind == "zerocheck_fuzz_target" else {name}

    def exists(path):
        path = path.rstrip("/.")
        return path in existing or path in folders

    for f in files:
        if not f.endswith(TEXT_SUFFIXES) and not f.startswith("ci/") and f != "CMakeLists.txt":
            continue
        if f.startswith(("fuzz/corpus/", "fuzz/regressions/", "harness/tests/scenarios/")):
            continue
        try:
            lines = read(root, f).splitlines()
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue
        for number, line in enumerate(lines, 1):
            for match in PATH.finditer(line):
                token = match.group(1)
                after = line[match.end():match.end() + 2]
                if any(c in after + token for c in "<>*{}$"):
                    continue  # a pattern, not a path
                if any(part.isupper() and "." not in part for part in token.split("/")):
                    continue  # a placeholder segment: DIR, NAME, T
                if token.startswith("../shared/"):
                    if shared and not os.path.exists(os.path.join(root, token)):
                        problems.append(f"{f}:{number}: cites {token}, which does not exist")
                    continue
                if token.startswith("build/"):
                    name = token.split("/")[3] if token.count("/") >= 3 else ""
                    if name and name not in targets:
                        problems.append(f"{f}:{number}: cites {token}, but no CMakeLists.txt declares {name}")
                    continue
                if not exists(token):
                    problems.append(f"{f}:{number}: cites {token}, which does not exist")


def main(root):
    files = tracked_files(root)
    problems = []
    check_paths(root, files, problems)
    tables = the_tables(root, files)
    check_counts(root, files, tables, problems)
    check_lists(root, files, tables, problems)
    for p in problems:
        print(p)
    print(f"docs_check: {len(files)} files read, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: docs_check.py SOURCE_DIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
