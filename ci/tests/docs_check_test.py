#!/usr/bin/env python3
"""ctest `docs_check_fails`: the docs check fails on a wrong count, a wrong list and a missing
name, naming the file, the line and the names, and passes on lists and counts that agree.

Runs the check's list and count rules on a scratch Markdown file against made-up tables, so it
needs neither a build nor the repository's own documents to be wrong.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import docs_check  # noqa: E402

TABLES = {"faults": (["skip-release", "wrong-divisor", "nan-after-step"], "ZERO3_FAULTS"),
          "deepspeed-faults": (["skip-last-param", "loss-scaled-twice"], "FAULTS")}

GOOD = """# Page

There are 3 planted faults and 2 planted DeepSpeed faults.

<!-- list: faults -->
| fault | what |
| --- | --- |
| `skip-release` | a |
| `wrong-divisor` | b |
| `nan-after-step` | c |

<!-- list: deepspeed-faults -->
- `skip-last-param`: one
- `loss-scaled-twice`: two
"""


def problems_of(text):
    with tempfile.TemporaryDirectory() as root:
        with open(os.path.join(root, "README.md"), "w", encoding="utf-8") as f:
            f.write(text)
        problems = []
        docs_check.check_counts(root, ["README.md"], TABLES, problems)
        docs_check.check_lists(root, ["README.md"], TABLES, problems)
        return problems


def expect(name, text, *wanted):
    problems = problems_of(text)
    missing = [w for w in wanted if not any(w in p for p in problems)]
    if (not wanted and problems) or missing:
        print(f"FAIL {name}: wanted {list(wanted) or 'no problem'}, got {problems}")
        return False
    print(f"ok   {name}: {problems or 'no problem'}")
    return True


def main():
    results = [
        expect("lists and counts that agree", GOOD),
        expect("a wrong count", GOOD.replace("2 planted DeepSpeed", "5 planted DeepSpeed"),
               'README.md:3: says "5 planted DeepSpeed faults", but FAULTS has 2'),
        expect("a wrong name in a list", GOOD.replace("`wrong-divisor`", "`wrong-division`"),
               "README.md:5: the list of faults differs from ZERO3_FAULTS (3 rows): "
               "missing: wrong-divisor; extra: wrong-division"),
        expect("a missing name", GOOD.replace("- `loss-scaled-twice`: two\n", ""),
               "the list of deepspeed-faults differs from FAULTS (2 rows): missing: loss-scaled-twice"),
        expect("a name twice", GOOD.replace("| `nan-after-step` | c |", "| `nan-after-step` | c |\n| `skip-release` | d |"),
               "twice: skip-release"),
        expect("a row without a name", GOOD.replace("| `nan-after-step` | c |", "| nan-after-step | c |"),
               "README.md:10: a row of the list of faults names nothing"),
        expect("an unknown kind", GOOD.replace("list: faults", "list: fautls"), "unknown list kind 'fautls'"),
        expect("a table without its list", GOOD.replace("<!-- list: faults -->\n", ""), "no document lists faults"),
        expect("a quoted count is a mention", GOOD + '\nNot like this: "seven planted faults".\n'),
    ]
    print(f"docs_check_test: {results.count(True)} of {len(results)} cases as expected")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
