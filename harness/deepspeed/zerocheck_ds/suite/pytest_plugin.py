"""pytest items for the upstream suite: `pytest --zerocheck-corpus builtin` (pyproject.toml's
`pytest11` entry point; from a checkout: `pytest -p zerocheck_ds.suite.pytest_plugin ...`).

One item per scenario of the corpus (console.py's --corpus and --only), `zerocheck::NAME`. The
first item to run replays the whole corpus once through the supervised suite (`python3 -m
zerocheck_ds suite` in a subprocess: the rank pool survives crashes and hangs, findings are
confirmed against the control and grouped by root cause); every item then reads its verdict:

- `ok`: passes;
- findings whose root causes are all KNOWN_UPSTREAM.md rows: xfail, the reason the rows (title:
  verdict, upstream issues);
- anything else: a failure whose text is the finding's report (the root cause's title, where
  upstream, an example with expected and actual, the minimal scenario's script when --shrink
  made one, the signatures).

With --zerocheck-corpus and no paths on the command line the corpus is the whole run: nothing under
the working folder is collected (a CI job's workspace holds DeepSpeed checkouts, whose own tests
pytest would otherwise collect, and fail to import twice under one name). Paths given are
collected as usual, beside the corpus's items.

A scenario the corpus's expected.json lists for this DeepSpeed version (its known root causes
as a run of that version found them) is marked xfail up front, so that a fix upstream shows as
XPASS and a new root cause still fails.
"""

import json
import os
import shlex
import subprocess
import sys
import tempfile

import pytest

from ..findings.root_causes import known_upstream
from . import console


class KnownUpstreamBug(Exception):
    """A scenario that fails only with root causes KNOWN_UPSTREAM.md triages."""


class ScenarioFailed(Exception):
    """A scenario with a finding no KNOWN_UPSTREAM.md row names (or a crash or hang)."""


def pytest_addoption(parser):
    group = parser.getgroup("zerocheck", "zerocheck: the upstream suite's scenarios as items")
    group.addoption("--zerocheck-corpus", metavar="NAME|DIR",
                    help="replay this corpus (`builtin`: the shipped one) and collect one item "
                         "per scenario")
    group.addoption("--zerocheck-only", default="", metavar="NAME[,NAME...]",
                    help="only these scenarios (fnmatch patterns allowed)")
    group.addoption("--zerocheck-world", type=int, default=2, metavar="N",
                    help="ranks (default 2)")
    group.addoption("--zerocheck-deepspeed-tree", metavar="DIR",
                    help="a DeepSpeed source tree (default: the installed DeepSpeed)")
    group.addoption("--zerocheck-shims", metavar="DIR", help="the suite's --shims")
    group.addoption("--zerocheck-out", metavar="DIR",
                    help="the suite's --out (default: a temporary folder)")
    group.addoption("--zerocheck-args", default="", metavar="ARGS",
                    help="more options for the suite, one string (e.g. '--shrink')")
    group.addoption("--zerocheck-expected", metavar="FILE",
                    help="known root causes per scenario and version (default: the corpus's "
                         "expected.json)")


def pytest_ignore_collect(collection_path, config):
    if config.getoption("--zerocheck-corpus") and not config.option.file_or_dir:
        return True
    return None


def pytest_collection_modifyitems(session, config, items):
    corpus = config.getoption("--zerocheck-corpus")
    if not corpus:
        return
    only = [n for n in config.getoption("--zerocheck-only").split(",") if n]
    files = console.corpus_files(corpus, only)
    run = CorpusRun(config, files)
    items.extend(ScenarioItem.from_parent(session, name=os.path.basename(f)[:-5], run=run,
                                         nodeid=f"zerocheck::{os.path.basename(f)[:-5]}")
                 for f in files)


class CorpusRun:
    """The one replay of the corpus every item reads its verdict from."""

    def __init__(self, config, files):
        self._config, self.files = config, files
        self.summary = None
        self.error = None

    def command(self, out):
        option = self._config.getoption
        command = [sys.executable, "-m", "zerocheck_ds", "suite", "--scenarios", *self.files,
                   "--out", out, "--world", str(option("--zerocheck-world"))]
        if option("--zerocheck-deepspeed-tree"):
            command += ["--deepspeed-tree", option("--zerocheck-deepspeed-tree")]
        if option("--zerocheck-shims"):
            command += ["--shims", option("--zerocheck-shims")]
        return command + shlex.split(option("--zerocheck-args"))

    def ensure(self):
        if self.summary is not None or self.error is not None:
            return
        out = self._config.getoption("--zerocheck-out") or tempfile.mkdtemp(prefix="zerocheck-")
        self.out = out
        env = dict(os.environ)
        package_parent = os.path.dirname(os.path.dirname(console.CORPUS_ROOT))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent,
                                                          env.get("PYTHONPATH")]))
        done = subprocess.run(self.command(out), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        self.log = done.stdout
        try:
            with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
                self.summary = json.load(f)
        except (OSError, ValueError) as e:
            self.error = (f"the suite wrote no summary ({e}); exit code {done.returncode}; "
                          f"its output ends:\n{done.stdout[-4000:]}")
            return
        self.known = known_upstream(console.known_upstream_path())
        self.expected = expected_causes(self._config.getoption("--zerocheck-expected"),
                                        self.summary.get("adapter_version"))

    def entry(self, name):
        return next((s for s in self.summary["scenarios"] if s["name"] == name), None)

    def causes_of(self, name):
        return [c for c in self.summary.get("root_causes", []) if name in c["scenarios"]]

    def verdict_file(self, name):
        try:
            with open(os.path.join(self.out, "verdicts", f"{name}.verdict.json"),
                      encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            return None


def expected_causes(path, version):
    """{scenario: [root cause title]} the expectation file lists for `version` (its keys are
    DeepSpeed versions; a key matches a version it starts)."""
    path = path or os.path.join(console.CORPUS_ROOT, "builtin", "expected.json")
    try:
        with open(path, encoding="utf-8") as f:
            table = json.load(f)
    except (OSError, ValueError):
        return {}
    for key, scenarios in table.get("versions", {}).items():
        if version and str(version).startswith(key):
            return scenarios
    return {}


def known_row(title, row):
    issues = ", ".join(f"#{i['number']}" for i in row.get("issues", []))
    return f"{title} -> KNOWN_UPSTREAM.md: {row['verdict']}" + (f" ({issues})" if issues else "")


def failure_text(name, entry, causes, verdict, known):
    """The finding's report for one scenario: report.md's section of each root cause, cut to
    this scenario."""
    lines = [f"scenario {name}: {entry['outcome']}"]
    for c in causes:
        lines += ["", f"root cause: {c['title']}"]
        if c.get("location"):
            lines.append(f"  upstream location: {c['location']['file']} "
                         f"{c['location']['function']}() lines {c['location'].get('lines')}")
        example = c.get("example") or {}
        lines.append(f"  example: {example.get('message', '')}")
        if "expected" in example or "actual" in example:
            lines.append(f"  expected: {example.get('expected')!r}")
            lines.append(f"  actual:   {example.get('actual')!r}")
        if c["title"] in known:
            lines.append("  " + known_row(c["title"], known[c["title"]]))
        else:
            lines.append("  KNOWN_UPSTREAM.md: not triaged (a new root cause)")
        minimal = c.get("minimal") or {}
        if minimal.get("repro"):
            lines.append(f"  script: {minimal['repro']}")
        if minimal.get("scenario"):
            lines.append(f"  minimal scenario: {minimal['scenario']}")
        if c.get("replay_command"):
            lines.append(f"  replay: {c['replay_command']}")
    lines += ["", "signatures:"] + [f"  {s}" for s in entry.get("signatures", [])]
    if verdict:
        for finding in verdict.get("findings", [])[:5]:
            if not any(c["example"] is finding for c in causes):
                lines.append(f"  - {finding.get('message')}")
        lines += [f"  note: {n}" for n in verdict.get("notes", [])]
    return "\n".join(lines)


class ScenarioItem(pytest.Item):
    def __init__(self, *, run, **kwargs):
        super().__init__(**kwargs)
        self.run = run

    def setup(self):
        self.run.ensure()
        if self.run.error is None and self.run.expected.get(self.name):
            titles = self.run.expected[self.name]
            self.add_marker(pytest.mark.xfail(
                reason="known upstream: " + "; ".join(titles), raises=KnownUpstreamBug,
                strict=False))

    def runtest(self):
        run = self.run
        if run.error is not None:
            raise ScenarioFailed(run.error)
        entry = run.entry(self.name)
        if entry is None:
            raise ScenarioFailed(f"the suite gave no verdict for {self.name}")
        if entry["outcome"] == "ok":
            return
        causes = run.causes_of(self.name)
        text = failure_text(self.name, entry, causes, run.verdict_file(self.name), run.known)
        titles = entry.get("root_causes") or []
        if (entry["outcome"] == "findings" and titles
                and all(t in run.known for t in titles)):
            reason = "; ".join(known_row(t, run.known[t]) for t in titles)
            if self.get_closest_marker("xfail") is not None:
                raise KnownUpstreamBug(reason)
            pytest.xfail(reason)
        raise ScenarioFailed(text)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, (ScenarioFailed, KnownUpstreamBug)):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"zerocheck scenario {self.name}"
