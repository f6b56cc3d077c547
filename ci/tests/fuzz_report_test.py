#!/usr/bin/env python3
"""ci/fuzz-report's pages show the numbers of the campaign they describe.

Runs ci/fuzz-report on copies of real, trimmed campaign and hunt folders
(ci/tests/fuzz-report-fixtures/, see its README.md: a folder with a table.txt is a hunt, any other
a campaign), reads the numbers back from the pages' ids and data-* attributes, and compares them with what
this test reads itself from fuzz.log (libFuzzer's fork-mode stats lines), summary.txt,
triage/signatures.tsv, table.txt and engine/faults.h. Checks the PNG plots when gnuplot is there
(under CI=true a missing gnuplot fails: ci/setup installs gnuplot-nox), the page without gnuplot,
that the page is self-contained (no script, nothing remote, every link resolves), and the
generator's usage errors.
"""
import html
import html.parser
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, "ci", "tests", "fuzz-report-fixtures")
GENERATOR = os.path.join(REPO, "ci", "fuzz-report")
PLOTS = ("report-exec-s.png", "report-coverage.png", "report-corpus.png")

failures = []
passes = 0


def check(condition, what):
    global passes
    if condition:
        passes += 1
    else:
        failures.append(what)
        print(f"FAIL: {what}")


def equal(actual, expected, what):
    check(str(actual) == str(expected), f"{what}: the page says {actual!r}, expected {expected!r}")


class Page(html.parser.HTMLParser):
    """Every element's attributes by id, the crash sections, the kill-matrix rows, the links and
    the text of <pre> blocks."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.by_id, self.crashes, self.faults, self.links, self.pres = {}, [], [], [], []
        self.tags = set()
        self._pre = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.add(tag)
        if "id" in a:
            self.by_id[a["id"]] = a
        if tag == "section" and "crash" in a.get("class", "").split():
            self.crashes.append(a)
        if tag == "tr" and "fault" in a.get("class", "").split():
            self.faults.append(a)
        for key in ("href", "src"):
            if key in a:
                self.links.append(a[key])
        if tag == "pre":
            self._pre = []

    def handle_data(self, data):
        if self._pre is not None:
            self._pre.append(data)

    def handle_endtag(self, tag):
        if tag == "pre" and self._pre is not None:
            self.pres.append("".join(self._pre))
            self._pre = None

    def value(self, element_id):
        element = self.by_id.get(element_id)
        return None if element is None else element.get("data-value")


def run_generator(mode, directory, env=None):
    return subprocess.run([sys.executable, GENERATOR, mode, directory], capture_output=True, text=True, env=env)


def read_page(directory):
    with open(os.path.join(directory, "report.html"), encoding="utf-8") as f:
        text = f.read()
    return text, Page(text)


def log_stats(directory):
    """The fork-mode stats lines of fuzz.log, read token by token:
    '#N: cov: C ft: F corp: K exec/s E oom/timeout/crash: O/T/X time: Ss job: J dft_time: D'."""
    rows = []
    with open(os.path.join(directory, "fuzz.log"), encoding="utf-8", errors="replace") as f:
        for line in f:
            tokens = line.split()
            if not tokens or not (tokens[0].startswith("#") and tokens[0].endswith(":")) or \
                    len(tokens) < 2 or tokens[1] != "cov:":
                continue
            row = {"executions": int(tokens[0][1:-1])}
            for name, value in zip(tokens[1::2], tokens[2::2]):
                row[name.rstrip(":")] = value
            oom, timeouts, crashes = (int(v) for v in row["oom/timeout/crash"].split("/"))
            rows.append(dict(executions=row["executions"], cov=int(row["cov"]), ft=int(row["ft"]),
                             corp=int(row["corp"]), exec_s=int(row["exec/s"]), time=int(row["time"].rstrip("s")),
                             oom=oom, timeouts=timeouts, crashes=crashes))
    return rows


def summary_fields(directory):
    """What summary.txt says, by its labels."""
    fields, findings = {}, []
    with open(os.path.join(directory, "summary.txt"), encoding="utf-8") as f:
        fields["header"] = f.readline()
        for line in f:
            stripped = line.strip()
            if stripped.startswith("[") and "] " in stripped:
                findings.append(stripped.split("] ", 1)[1])
            elif line.startswith("  ") and ":" in stripped and not line.startswith("      "):
                label, rest = stripped.split(":", 1)
                fields[label] = rest.strip()
    fields["executions_n"], rest = fields["executions"].split(" (", 1)
    fields["exec_s_n"] = rest.split(" ")[0]
    cov, ft = fields["coverage"].split(", ")
    fields["cov_n"], fields["ft_n"] = cov.split()[1], ft.split()[1]
    fields["corpus_n"] = fields["corpus"].split()[0]
    crashes = fields["crashes"]
    fields["artifacts_n"] = crashes.split()[0]
    fields["triaged_n"] = crashes.split("(")[1].split()[0]
    fields["distinct_n"] = crashes.split("), ")[1].split()[0]
    fields["first_crash_n"] = crashes.split("after ")[1].split()[0] if "while fuzzing after" in crashes else ""
    fields["findings"] = findings
    fields["target"] = fields["header"].split("target ", 1)[1].split(",")[0]
    return fields


def check_self_contained(directory, text, page, name):
    check("<script" not in text.lower(), f"{name}: the page has no script")
    for href in page.links:
        check("://" not in href and not href.startswith("//"), f"{name}: link '{href}' is relative")
        if "://" not in href and not href.startswith("#"):
            check(os.path.exists(os.path.join(directory, html.unescape(href))),
                  f"{name}: link '{href}' resolves to a file beside the page")


def check_plots(directory, page, name, has_stats):
    state = page.by_id.get("plots", {}).get("data-state")
    if not has_stats:  # e.g. a hunt's campaign whose seed check found the fault: no fuzzing
        equal(state, "no-data", f"{name}: plots state without stats lines")
        return
    if shutil.which("gnuplot") is None:
        if os.environ.get("CI") == "true":
            check(False, f"{name}: gnuplot is not installed under CI=true (ci/setup installs gnuplot-nox)")
        else:
            print(f"note: gnuplot is not installed, the PNGs of {name} are not checked")
            equal(state, "no-gnuplot", f"{name}: plots state without gnuplot")
        return
    equal(state, "ok", f"{name}: plots state")
    for png in PLOTS:
        path = os.path.join(directory, png)
        data = open(path, "rb").read() if os.path.exists(path) else b""
        check(data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000, f"{name}: {png} is a non-empty PNG")
        check(png in page.links, f"{name}: the page shows {png}")


def check_campaign(directory, name, expect_stats=True):
    result = run_generator("campaign", directory)
    equal(result.returncode, 0, f"{name}: ci/fuzz-report campaign exit ({result.stderr.strip()})")
    text, page = read_page(directory)
    stats = log_stats(directory)
    summary = summary_fields(directory)
    if expect_stats:
        check(len(stats) > 1, f"{name}: the fixture's fuzz.log has stats lines")
    # Without stats lines the summary says '?' and the page has no value.
    last = stats[-1] if stats else {key: "" for key in ("executions", "exec_s", "cov", "ft", "corp", "time",
                                                        "oom", "timeouts", "crashes")}
    summary = {k: ("" if v == "?" else v) for k, v in summary.items()}

    # The final numbers: the log's last stats line, and the summary agrees with it.
    equal(page.value("stats-lines"), len(stats), f"{name}: stats lines")
    for element_id, key in (("final-executions", "executions"), ("final-exec-s", "exec_s"), ("final-cov", "cov"),
                            ("final-ft", "ft"), ("final-corp", "corp"), ("final-time", "time"),
                            ("final-oom", "oom"), ("final-timeouts", "timeouts"), ("final-crashes", "crashes")):
        equal(page.value(element_id), last[key], f"{name}: {element_id} (fuzz.log's last stats line)")
    for element_id, key in (("final-executions", "executions_n"), ("final-exec-s", "exec_s_n"),
                            ("final-cov", "cov_n"), ("final-ft", "ft_n"), ("corpus-files", "corpus_n"),
                            ("crash-artifacts", "artifacts_n"), ("crash-triaged", "triaged_n"),
                            ("crash-distinct", "distinct_n"), ("first-crash-seconds", "first_crash_n")):
        equal(page.value(element_id), summary[key], f"{name}: {element_id} (summary.txt)")

    # Time to the first crash: the first stats line counting a crash. (Stopping at the first crash,
    # libFuzzer may exit before it prints one; the summary then gives the fuzzing time, checked above.)
    first = next((r["time"] for r in stats if r["crashes"]), None)
    if first is not None or not summary["first_crash_n"]:
        equal(page.value("first-crash-seconds"), "" if first is None else first,
              f"{name}: first crash (fuzz.log's first stats line with a crash)")

    # The plotted series are the log's, line for line.
    tsv_path = os.path.join(directory, "report-stats.tsv")
    tsv = [line.split("\t") for line in open(tsv_path) if not line.startswith("#")] if stats else []
    equal([[int(v) for v in row] for row in tsv],
          [[r["time"], r["executions"], r["cov"], r["ft"], r["corp"], r["exec_s"]] for r in stats],
          f"{name}: report-stats.tsv")

    # Seed check.
    seed = summary["seed check"]
    expected = "none" if seed.startswith("none") else "held" if seed.startswith("every seed held") else "fails"
    equal(page.by_id.get("seed-check", {}).get("data-status"), expected, f"{name}: seed check")

    # Crashes by signature: the counts of triage/signatures.tsv, the summary's signatures.
    counts = {}
    tsv_path = os.path.join(directory, "triage", "signatures.tsv")
    for line in open(tsv_path, encoding="utf-8") if os.path.exists(tsv_path) else []:
        signature = line.rstrip("\n").split("\t", 1)[1]
        counts[signature] = counts.get(signature, 0) + 1
    artifacts = os.path.join(directory, "artifacts")
    if os.path.isdir(artifacts):
        equal(page.value("crash-artifacts"), len(os.listdir(artifacts)), f"{name}: files in artifacts/")
    shown = {c["data-signature"]: int(c["data-artifacts"]) for c in page.crashes}
    equal(shown, counts, f"{name}: artifacts per signature")
    equal(sum(shown.values()), summary["triaged_n"], f"{name}: artifacts over all signatures")
    equal(len(page.crashes), summary["distinct_n"], f"{name}: signatures")
    equal([c["data-signature"] for c in page.crashes], summary["findings"], f"{name}: signatures in order")
    scenarios = sorted(os.listdir(os.path.join(directory, "scenarios"))) if os.path.isdir(
        os.path.join(directory, "scenarios")) else []
    for scenario in scenarios:
        with open(os.path.join(directory, "scenarios", scenario), encoding="utf-8") as f:
            check(f.read() in page.pres, f"{name}: scenario {scenario} is inlined, escaped, in the page")
    for line in open(os.path.join(directory, "summary.txt"), encoding="utf-8"):
        if line.startswith("      replay:"):
            check(line.split(":", 1)[1].strip() in page.pres, f"{name}: replay command shown")
        if line.startswith("      minimised:"):  # minimised: <out>/minimized/NAME (N bytes, from M)
            minimized = "minimized/" + line.split()[1].rsplit("/", 1)[1]
            check(minimized in page.links, f"{name}: links the minimised input {minimized}")

    check_plots(directory, page, name, bool(stats))
    check_self_contained(directory, text, page, name)

    # Without gnuplot the page is still written and says how to get the plots.
    bare = tempfile.mkdtemp(prefix="fuzz-report-nognuplot-")
    try:
        os.symlink(sys.executable, os.path.join(bare, "python3"))
        env = dict(os.environ, PATH=bare)
        result = run_generator("campaign", directory, env)
        equal(result.returncode, 0, f"{name}: ci/fuzz-report without gnuplot exit ({result.stderr.strip()})")
        text, page = read_page(directory)
        if stats:
            equal(page.by_id.get("plots", {}).get("data-state"), "no-gnuplot",
                  f"{name}: plots state without gnuplot")
            check("gnuplot-nox" in text, f"{name}: the page without plots names gnuplot-nox")
        equal(page.value("final-executions"), last["executions"], f"{name}: executions without gnuplot")
    finally:
        shutil.rmtree(bare)
    run_generator("campaign", directory)  # leave the full page for the hunt's links


def check_hunt(directory, name):
    invariants = {}
    for line in open(os.path.join(REPO, "engine", "faults.h"), encoding="utf-8"):
        parts = [p.strip().strip('"') for p in line.strip().split(",")]
        if line.strip().startswith("X(") and len(parts) > 2:
            invariants[parts[1]] = parts[2]
    expected = []
    for line in open(os.path.join(directory, "table.txt"), encoding="utf-8"):
        words = line.split()
        if "found after" in line:
            # FAULT found after N s (seed check|fuzzing) SIGNATURE
            by = "seed check" if "(seed check)" in line else "fuzzing"
            signature = line.split(f"({by})", 1)[1].strip()
            expected.append(dict(fault=words[0], found="yes", seconds=words[3], by=by, signature=signature))
        elif "NOT FOUND" in line:
            expected.append(dict(fault=words[0], found="no", seconds="", by="", signature=""))
    for row in expected:  # the hunt's campaigns write their own pages before the hunt's
        check_campaign(os.path.join(directory, row["fault"]), f"{name}/{row['fault']}", expect_stats=False)
    result = run_generator("hunt", directory)
    equal(result.returncode, 0, f"{name}: ci/fuzz-report hunt exit ({result.stderr.strip()})")
    text, page = read_page(directory)
    check(len(expected) >= 2, f"{name}: the fixture's table has rows")
    equal(len(page.faults), len(expected), f"{name}: kill matrix rows")
    equal(page.value("faults-total"), len(expected), f"{name}: faults")
    equal(page.value("faults-found"), sum(r["found"] == "yes" for r in expected), f"{name}: faults found")
    for shown, row in zip(page.faults, expected):
        fault = row["fault"]
        equal(shown.get("data-fault"), fault, f"{name}: fault")
        equal(shown.get("data-invariant"), invariants.get(fault), f"{name}: {fault}'s invariant (engine/faults.h)")
        for key in ("found", "seconds", "by", "signature"):
            equal(shown.get(f"data-{key}"), row[key], f"{name}: {fault}'s {key} (table.txt)")
        if row["found"] == "yes":  # the table's figures are the fault campaign's
            summary = summary_fields(os.path.join(directory, fault))
            seconds = (summary["seed check"].split("after ")[1].split()[0] if row["by"] == "seed check"
                       else summary["first_crash_n"])
            equal(shown.get("data-seconds"), seconds, f"{name}: {fault}'s seconds (its summary.txt)")
            equal(shown.get("data-signature"), summary["findings"][0], f"{name}: {fault}'s signature (its summary.txt)")
        check(f"{fault}/report.html" in page.links, f"{name}: links {fault}'s campaign page")
    targets = {summary_fields(os.path.join(directory, r["fault"]))["target"] for r in expected}
    equal(page.by_id.get("hunt-target", {}).get("data-value"), " ".join(sorted(targets)), f"{name}: target")
    check_self_contained(directory, text, page, name)


def check_usage(scratch):
    for args, fragment in (([], "needs a mode"), (["campaign"], "needs a mode"), (["bogus", scratch], "needs a mode"),
                           (["campaign", os.path.join(scratch, "missing")], "is not a folder"),
                           (["hunt", os.path.join(scratch, "reference")], "has no table.txt")):
        result = subprocess.run([sys.executable, GENERATOR, *args], capture_output=True, text=True)
        check(result.returncode == 2 and fragment in result.stderr,
              f"usage: ci/fuzz-report {' '.join(args)} exits 2 with '{fragment}' (got {result.returncode}: "
              f"{result.stderr.strip()})")


def main():
    scratch = tempfile.mkdtemp(prefix="fuzz-report-test-")
    try:
        fixtures = sorted(f for f in os.listdir(FIXTURES) if os.path.isdir(os.path.join(FIXTURES, f)))
        check({"reference", "crashes"} <= set(fixtures), "the fixtures have a campaign without and one with crashes")
        for fixture in fixtures:
            directory = os.path.join(scratch, fixture)
            shutil.copytree(os.path.join(FIXTURES, fixture), directory)
            if os.path.exists(os.path.join(directory, "table.txt")):
                check_hunt(directory, fixture)
            else:
                check_campaign(directory, fixture)
        check_usage(scratch)
    finally:
        if os.environ.get("FUZZ_REPORT_TEST_KEEP"):
            print(f"kept {scratch}")
        else:
            shutil.rmtree(scratch)
    print(f"fuzz_report_test: {passes} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
