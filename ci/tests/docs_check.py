#!/usr/bin/env python3
"""The docs cite what exists: every repository path in comments, scripts and Markdown is there,
and every count a README states is the count of the table it counts.

usage: docs_check.py SOURCE_DIR

Paths: a token that starts with one of the repository's top folders (engine/, harness/, ci/, ...)
and names a file or folder must exist; `../shared/...` must exist when ../shared does; a
`build/<preset>/bin/NAME` must name a target some CMakeLists.txt declares. Tokens with
placeholders (<...>, *, {...}, $) are patterns, not paths, and are skipped.

Counts: "<number> invariants", "<number> planted faults" (or "faults"), "<number> deep faults",
"<number> ...targets" in a README, and the exit codes README lists, against ZEROCHECK_INVARIANTS
(harness/scenario/invariants.h), ZERO3_FAULTS and ZERO3_DEEP_FAULTS (engine/faults.h), the
zerocheck_fuzz_target calls of fuzz/CMakeLists.txt and ZEROCHECK_EXIT_CODES (harness/cli/command.h).

Prints FILE:LINE and what is wrong for each problem; exit 1 when there is one.
"""
import os
import re
import subprocess
import sys

TOP = ("engine", "harness", "fuzz", "properties", "ci", "cmake", ".clusterfuzzlite", ".github", ".ci")
TEXT_SUFFIXES = (".md", ".h", ".cc", ".py", ".cmake", ".sh", ".txt", ".yml", ".yaml", ".toml")
PATH = re.compile(r"(?<![\w./-])((?:\.\./shared/|build/[\w-]+/bin/|(?:%s)/)[\w./+-]*[\w/])" % "|".join(
    re.escape(t) for t in TOP))
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
           "ten": 10, "eleven": 11, "twelve": 12}
NUMBER = r"(\d+|" + "|".join(NUMBERS) + r")"


def tracked_files(root):
    out = subprocess.run(["git", "-C", root, "ls-files", "-co", "--exclude-standard"], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit("docs_check: not a git work tree: " + root)
    return sorted(set(out.stdout.split()))


def number_of(word):
    return int(word) if word.isdigit() else NUMBERS[word.lower()]


def table_rows(text, macro):
    """The rows of an X-macro table: `X(` at the start of a continued line inside #define macro."""
    start = text.index("#define " + macro + "(X)")
    body = []
    for line in text[start:].splitlines()[1:]:
        body.append(line)
        if not line.rstrip().endswith("\\"):
            break
    return sum(1 for line in body if re.match(r"\s*X\(", line))


def declared_targets(root, files):
    names = set()
    for f in files:
        if os.path.basename(f) != "CMakeLists.txt":
            continue
        text = open(os.path.join(root, f), encoding="utf-8").read()
        for kind, name in re.findall(r"\b(zerocheck_executable|zerocheck_test|add_executable|zerocheck_fuzz_target)\(\s*([\w-]+)", text):
            if kind == "zerocheck_fuzz_target":
                names |= {"fuzz_" + name, "fuzz_" + name + "_replay_tests"}
            else:
                names.add(name)
    return names


def main(root):
    files = tracked_files(root)
    existing = set(files)
    folders = {os.path.dirname(f) for f in files}
    for f in list(folders):
        while f:
            f = os.path.dirname(f)
            folders.add(f)
    shared = os.path.isdir(os.path.join(root, "..", "shared"))
    targets = declared_targets(root, files)
    problems = []

    def exists(path):
        path = path.rstrip("/.")
        return path in existing or path in folders

    for f in files:
        if not f.endswith(TEXT_SUFFIXES) and not f.startswith("ci/") and f != "CMakeLists.txt":
            continue
        if f.startswith(("fuzz/corpus/", "fuzz/regressions/", "harness/tests/scenarios/")):
            continue
        try:
            lines = open(os.path.join(root, f), encoding="utf-8").read().splitlines()
        except (UnicodeDecodeError, IsADirectoryError):
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

    # Counts a README states against the tables.
    invariants = table_rows(open(os.path.join(root, "harness/scenario/invariants.h")).read(), "ZEROCHECK_INVARIANTS")
    faults_h = open(os.path.join(root, "engine/faults.h")).read()
    faults = table_rows(faults_h, "ZERO3_FAULTS")
    deep_faults = table_rows(faults_h, "ZERO3_DEEP_FAULTS")
    fuzz_targets = len(re.findall(r"^zerocheck_fuzz_target\(", open(os.path.join(root, "fuzz/CMakeLists.txt")).read(),
                                  re.M))
    exit_codes = table_rows(open(os.path.join(root, "harness/cli/command.h")).read(), "ZEROCHECK_EXIT_CODES")
    counted = [(r"\b" + NUMBER + r" invariants\b", invariants, "ZEROCHECK_INVARIANTS"),
               (r"\b" + NUMBER + r" (?:planted )?faults\b", faults, "ZERO3_FAULTS"),
               (r"\b" + NUMBER + r" deep faults\b", deep_faults, "ZERO3_DEEP_FAULTS"),
               (r"\b" + NUMBER + r" (?:coverage-guided |libFuzzer |fuzz )?targets\b", fuzz_targets,
                "fuzz/CMakeLists.txt's zerocheck_fuzz_target"),
               (r"\b" + NUMBER + r" exit codes\b", exit_codes, "ZEROCHECK_EXIT_CODES")]
    for f in files:
        if os.path.basename(f) != "README.md":
            continue
        for number, line in enumerate(open(os.path.join(root, f), encoding="utf-8").read().splitlines(), 1):
            for pattern, actual, table in counted:
                for match in re.finditer(pattern, line, re.I):
                    if number_of(match.group(1)) != actual:
                        problems.append(f"{f}:{number}: says \"{match.group(0)}\", but {table} has {actual}")
    # README's exit-code table: one row per code of the table, in order.
    readme = open(os.path.join(root, "README.md"), encoding="utf-8").read()
    rows = re.findall(r"^\| (\d) \|", readme, re.M)
    if rows != [str(i) for i in range(exit_codes)]:
        problems.append(f"README.md: the exit-code table lists {rows}, ZEROCHECK_EXIT_CODES has 0..{exit_codes - 1}")

    for p in problems:
        print(p)
    print(f"docs_check: {len(files)} files read, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: docs_check.py SOURCE_DIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
