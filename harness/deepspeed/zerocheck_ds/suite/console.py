"""The command line: `zerocheck-ds` (pyproject.toml's console script) and `python3 -m zerocheck_ds`.

`zerocheck-ds --version` prints the package's version and the scenario schema's format. The
subcommands are __main__.py's: `suite` (suite.py), `campaign` (campaign.py), `merge` (of
campaigns' shards, campaign_merge.py), `worker`, `bisect`,
`bisect-step`, and without one the in-process runner. `suite` takes, beside `--scenarios`, `--corpus NAME|DIR` (the
shipped corpus, `builtin`: zerocheck_ds/corpus/builtin, corpus.json says what it holds) and
`--only NAME[,NAME...]` (only the scenarios with those names, fnmatch patterns allowed).
`corpus [NAME|DIR] --coverage [--json]` lists what the corpus's scenarios cover of the scenario
schema and what they miss (scenario/corpus_coverage.py; corpus.json's "coverage" says what is left
out on purpose and why); exit 0 when nothing is missing, 1 when something is.
"""

import fnmatch
import json
import os
import sys

VERSION = "0.1.0"  # pyproject.toml reads it from here
CORPUS_ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "corpus")
CORPORA = ("builtin",)


def schema_format():
    """The scenario format a writer writes (scenario/schema.json, the C++ tables) and what a reader
    reads."""
    from ..scenario import schema
    return f"{schema.FORMAT}; reads {', '.join(schema.READ_FORMATS)}"


def version_text():
    return f"zerocheck-ds {VERSION} (scenario schema format {schema_format()})"


def corpus_folder(name):
    """The folder of a shipped corpus (`builtin`), or `name` itself when it is a folder."""
    if name in CORPORA:
        return os.path.join(CORPUS_ROOT, name)
    if os.path.isdir(name):
        return name
    raise SystemExit(f"zerocheck-ds: --corpus {name}: neither a shipped corpus "
                     f"({', '.join(CORPORA)}) nor a folder")


def corpus_files(name, only=None):
    """The corpus's scenario files (every *.json below its folder but its own manifests), sorted
    by scenario name; `only`: names or fnmatch patterns, of which each must match one."""
    folder = corpus_folder(name)
    found = {}
    for here, subfolders, names in os.walk(folder):
        subfolders.sort()
        for file in sorted(names):
            if file.endswith(".json") and here != folder:  # manifests lie at the top
                found.setdefault(file[:-5], os.path.join(here, file))
    if only:
        patterns = [p for p in only if p]
        for pattern in patterns:
            if not any(fnmatch.fnmatchcase(n, pattern) for n in found):
                raise SystemExit(f"zerocheck-ds: --only {pattern}: no scenario of {name} "
                                 f"has that name")
        found = {n: p for n, p in found.items()
                 if any(fnmatch.fnmatchcase(n, p) for p in patterns)}
    return [found[n] for n in sorted(found)]


def known_upstream_path():
    """KNOWN_UPSTREAM.md: the checkout's, or installed the copy the package ships
    (findings/root_causes.py)."""
    from ..findings.root_causes import KNOWN_UPSTREAM
    return KNOWN_UPSTREAM


def corpus_manifest(name):
    """The corpus's corpus.json (a folder without one: {})."""
    path = os.path.join(corpus_folder(name), "corpus.json")
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def corpus_coverage(name):
    """The Coverage of corpus `name` against the schema, with the corpus's own exclusions."""
    from ..scenario import corpus_coverage as coverage
    return coverage.coverage(corpus_files(name), corpus_manifest(name).get("coverage"))


CORPUS_USAGE = "usage: zerocheck-ds corpus [NAME|DIR] --coverage [--json]"


def corpus_command(argv):
    """`corpus [NAME|DIR] --coverage [--json]`: the coverage listing (or its JSON) on stdout."""
    from ..scenario import corpus_coverage as coverage
    flags = [a for a in argv if a.startswith("-")]
    names = [a for a in argv if not a.startswith("-")]
    if "--coverage" not in flags or set(flags) - {"--coverage", "--json"} or len(names) > 1:
        print(CORPUS_USAGE, file=sys.stderr)
        return 2
    result = corpus_coverage(names[0] if names else "builtin")
    if "--json" in flags:
        print(json.dumps(result.to_json(), indent=1))
    else:
        print(coverage.listing(result))
    return 0 if result.complete() else 1


def suite_argv(argv):
    """`suite` arguments with --corpus/--only replaced by the --scenarios they stand for."""
    rest, corpus, only = [], None, []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--corpus", "--only") and i + 1 < len(argv):
            value, i = argv[i + 1], i + 2
        elif arg.startswith(("--corpus=", "--only=")):
            value, i = arg.split("=", 1)[1], i + 1
            arg = arg.split("=", 1)[0]
        else:
            rest.append(arg)
            i += 1
            continue
        if arg == "--corpus":
            corpus = value
        else:
            only += value.split(",")
    if corpus is None:
        if only:
            raise SystemExit("zerocheck-ds suite: --only needs --corpus")
        return rest
    if "--scenarios" in rest:
        raise SystemExit("zerocheck-ds suite: --corpus or --scenarios, not both")
    return ["--scenarios", *corpus_files(corpus, only), *rest]


def run(argv):
    if argv[:1] in (["--version"], ["-V"]):
        print(version_text())
        return 0
    if argv[:1] == ["suite"]:
        from .suite import main
        rest = argv[1:]
        if "-h" not in rest and "--help" not in rest:
            rest = suite_argv(rest)
        return main(rest)
    if argv[:1] == ["campaign"]:
        from .campaign import main
        return main(argv[1:])
    if argv[:1] == ["merge"]:
        from .campaign_merge import main
        return main(argv[1:])
    if argv[:1] == ["corpus"]:
        return corpus_command(argv[1:])
    if argv[:1] == ["bisect"]:
        from ..repro.bisect import main
        return main(argv[1:])
    if argv[:1] == ["bisect-step"]:
        from ..repro.bisect import step_main
        return step_main(argv[1:])
    if argv[:1] == ["worker"]:
        from .worker import main
        return main(argv[1:])
    from .runner import main
    return main(argv)


def main():
    """The console script's entry: `zerocheck-ds ARGS`."""
    sys.exit(run(sys.argv[1:]))
