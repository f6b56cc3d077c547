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

Then runs `ci/fuzz-fault-hunt --all --random` with the fakes of ci/tests/fakes/ (a campaign that
copies those fixtures, a zerocheck that prints check's JSON): the time-to-find tables (JSON,
table.md, the page) must hold what this test recomputes from the hunts' files, the runner must
pass each fault's target, seed and budget, and a cap that leaves no room must show the hunts it
cut off as "not run (cap)".
"""
import html
import html.parser
import json
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
        self.by_id, self.crashes, self.faults, self.links, self.pres, self.rows = {}, [], [], [], [], {}
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
        if tag == "tr":
            for name in a.get("class", "").split():
                self.rows.setdefault(name, []).append(a)
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
    fields["campaign_exec_s_n"] = fields["exec_s_n"] = None
    if " in " in fields["executions"]:  # "N in S s: R exec/s over the campaign[ (the last job's own: E)]"
        fields["executions_n"], rest = fields["executions"].split(" in ", 1)
        fields["campaign_exec_s_n"] = rest.split(": ", 1)[1].split(" ")[0]
        if "own: " in rest:
            fields["exec_s_n"] = rest.split("own: ")[1].rstrip(")")
    else:  # written before: "N (E exec/s)", the last job's
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
    if summary["campaign_exec_s_n"] is not None:
        equal(page.value("campaign-exec-s"), summary["campaign_exec_s_n"], f"{name}: campaign-exec-s (summary.txt)")
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


# ---------------------------------------------------------------------------------------------
# ci/fuzz-fault-hunt --all and `ci/fuzz-report time-to-find`, driven with the fakes of
# ci/tests/fakes/ (a campaign that copies the fixtures above, a zerocheck that prints check's JSON)
# ---------------------------------------------------------------------------------------------

HUNT = os.path.join(REPO, "ci", "fuzz-fault-hunt")
FAKES = os.path.join(REPO, "ci", "tests", "fakes")
HUNT_FAULTS = ("shard-offset-off-by-one", "accept-repeated-initialize", "legacy-0.15.4")


def run_hunt_all(out, *args, env=None):
    env = dict(os.environ, ZEROCHECK_HUNT_CAMPAIGN=os.path.join(FAKES, "fuzz-campaign"), **(env or {}))
    env.pop("ZEROCHECK_CHOICE_MUTATOR", None)  # the defaults are what the tests check
    return subprocess.run([HUNT, "--all", "--minutes", "0.05", "--random", "--zerocheck",
                           os.path.join(FAKES, "zerocheck"), "--out", out, *args],
                          capture_output=True, text=True, env=env)


def catalogue_rows():
    """{fault: (invariant, deep)} from engine/faults.h: deep when the row is in ZERO3_DEEP_FAULTS."""
    rows, deep = {}, False
    for line in open(os.path.join(REPO, "engine", "faults.h"), encoding="utf-8"):
        if line.startswith("#define "):
            deep = line.startswith("#define ZERO3_DEEP_FAULTS(")
        parts = [p.strip().strip('"') for p in line.strip().split(",")]
        if line.strip().startswith("X(") and len(parts) > 2 and parts[2].startswith("I"):
            rows[parts[1]] = (parts[2], deep)
    return rows


def fuzzer_executions(folder):
    """fuzz.log's last fork-mode count plus the final count of a job log printed after it."""
    total, after = None, 0
    for line in open(os.path.join(folder, "fuzz.log"), encoding="utf-8", errors="replace"):
        tokens = line.split()
        if len(tokens) > 1 and tokens[0].startswith("#") and tokens[0].endswith(":") and tokens[1] == "cov:":
            total, after = int(tokens[0][1:-1]), 0
        elif line.startswith("stat::number_of_executed_units:"):
            after += int(tokens[1])
    return None if total is None and not after else (total or 0) + after


def expected_rep(out, side, fault, rep):
    """(state, seconds, executions) of one hunt, read from what its fake left in OUT."""
    folder = os.path.join(out, side, fault, f"rep-{rep}")
    if side == "fuzzer":
        summary = summary_fields(folder)
        found = bool(summary["findings"]) and summary["findings"][0].split()[1] == fault
        return ("found" if found else "not found", float(summary["first_crash_n"]) if found else None,
                fuzzer_executions(folder))
    text = open(os.path.join(folder, "check.json"), encoding="utf-8").read().strip()
    if not text:
        return "failed", None, None
    result = json.loads(text)
    if result["violations"]:
        v = result["violations"][0]
        return "found", float(v["seconds_to_find"]), v["cases_to_find"]
    return "not found", None, result["cases_run"]


def seconds_cell(value, miss, budget):
    shown = budget if miss else value
    text = str(int(shown)) if float(shown).is_integer() else f"{shown:.1f}" if shown < 10 else f"{shown:.0f}"
    return (">" if miss else "") + text


def check_time_to_find(scratch):
    out = os.path.join(scratch, "time-to-find")
    result = run_hunt_all(out, "--reps", "3", "--faults", " ".join(HUNT_FAULTS), "--choice-mutator", "off")
    # shard-offset-off-by-one's third fuzzer repetition finds nothing: the goal is not met.
    equal(result.returncode, 1, f"time-to-find: exit ({result.stderr.strip()[-300:]})")
    check("not run (cap): none" in result.stdout, "time-to-find: the output says the cap cut nothing")
    check("choice-level mutator off." in result.stdout, "time-to-find: the output says the choice mutator was off")
    catalogue, budget = catalogue_rows(), 3.0
    with open(os.path.join(out, "time-to-find.json"), encoding="utf-8") as f:
        tables = json.load(f)
    text, page = read_page(out)
    rows = {r["data-fault"]: r for r in page.rows.get("ttf", [])}
    markdown = {}
    for line in open(os.path.join(out, "table.md"), encoding="utf-8"):
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            markdown[cells[0].strip("`")] = cells
    equal([f["fault"] for f in tables["faults"]], list(HUNT_FAULTS), "time-to-find: faults in order")
    equal(len(markdown), len(HUNT_FAULTS), "time-to-find: table.md rows")
    for f in tables["faults"]:
        fault = f["fault"]
        invariant, deep = catalogue[fault]
        target = "attrs" if not deep and invariant in ("I1", "I2", "I5") else "scenario_ops"
        equal((f["invariant"], f["deep"], f["target"]), (invariant, "yes" if deep else "no", target),
              f"time-to-find: {fault}'s invariant, deep and target (engine/faults.h)")
        equal(markdown[fault][1:3], [invariant, "yes" if deep else "no"], f"time-to-find: {fault}'s table.md columns")
        for side_index, side in enumerate(("fuzzer", "random")):
            reps = [expected_rep(out, side, fault, rep) for rep in (1, 2, 3)]
            found = [r for r in reps if r[0] == "found"]
            failed = sum(r[0] == "failed" for r in reps)
            # Finds by time, then the misses (each counted as the budget): median and max.
            times = sorted((0, r[1]) if r[0] == "found" else (1, budget) for r in reps)
            median, maximum = times[1], times[2]
            executions = sorted(r[2] for r in reps if r[2] is not None)
            a = f[side]
            equal((a["found"], a["ran"], a["failed"], a["not_run_cap"]), (len(found), 3, failed, 0),
                  f"time-to-find: {fault} {side}: found, ran, failed, cut")
            equal((a["median_seconds"], a["median_is_miss"], a["max_seconds"], a["max_is_miss"]),
                  (median[1], bool(median[0]), maximum[1], bool(maximum[0])), f"time-to-find: {fault} {side}: seconds")
            equal(a["median_executions"], executions[(len(executions) - 1) // 2], f"time-to-find: {fault} {side}: executions")
            found_cell = f"{len(found)}/3" + (f", {failed} failed" if failed else "")
            cells = [found_cell, seconds_cell(median[1], median[0], budget), seconds_cell(maximum[1], maximum[0], budget)]
            equal(markdown[fault][3 + 3 * side_index:6 + 3 * side_index], cells, f"time-to-find: {fault} {side}: table.md")
            row = rows.get(fault, {})
            equal([row.get(f"data-{side}-found"), row.get(f"data-{side}-median"), row.get(f"data-{side}-max")],
                  [str(len(found)), cells[1], cells[2]], f"time-to-find: {fault} {side}: the page's row")
            for rep in (1, 2, 3):  # what the runner asked of the campaign and of zerocheck
                folder = os.path.join(out, side, fault, f"rep-{rep}")
                args = open(os.path.join(folder if side == "fuzzer" else os.path.join(folder, "scenarios"),
                                         "fake-args.txt"), encoding="utf-8").read().split("\n")
                wanted = ([["--target", target], ["--engine", fault], ["--seed", str(rep)], ["--minutes", "0.05"],
                           ["--jobs", "1"], ["--stop-at-first-crash"], ["--no-seeds"]] if side == "fuzzer" else
                          [["--engine", fault], ["--seed", str(rep)], ["--time", "3"], ["--json"]])
                if side == "fuzzer":
                    equal(open(os.path.join(folder, "fake-env.txt"), encoding="utf-8").read().strip(),
                          "ZEROCHECK_CHOICE_MUTATOR=off", f"time-to-find: {fault} rep {rep}'s choice mutator")
                for pair in wanted:
                    check(any(args[i:i + len(pair)] == pair for i in range(len(args))),
                          f"time-to-find: {side} rep {rep} of {fault} was run with {' '.join(pair)}")
    check("ASan+UBSan" in tables["settings"].get("zerocheck_sanitizers", ""),
          "time-to-find: the sanitizers are read from the zerocheck binary")
    check(tables["every_fuzzer_hunt_found"] is False, "time-to-find: a fuzzer miss fails the goal")
    state = page.by_id.get("plots", {}).get("data-state")
    if shutil.which("gnuplot") is None and os.environ.get("CI") != "true":
        equal(state, "no-gnuplot", "time-to-find: plot state without gnuplot")
    else:
        equal(state, "ok", "time-to-find: plot state")
        with open(os.path.join(out, "time-to-find.png"), "rb") as f:
            check(f.read(8) == b"\x89PNG\r\n\x1a\n", "time-to-find: time-to-find.png is a PNG")
    check_self_contained(out, text, page, "time-to-find")
    equal(len(page.rows.get("hunt", [])), 18, "time-to-find: the page lists every hunt")
    # Without gnuplot the page is still written and says how to get the plot.
    bare = tempfile.mkdtemp(prefix="fuzz-report-nognuplot-")
    try:
        os.symlink(sys.executable, os.path.join(bare, "python3"))
        result = run_generator("time-to-find", out, dict(os.environ, PATH=bare))
        equal(result.returncode, 0, f"time-to-find without gnuplot: exit ({result.stderr.strip()})")
        text, page = read_page(out)
        equal(page.by_id.get("plots", {}).get("data-state"), "no-gnuplot", "time-to-find: plot state without gnuplot")
        check("gnuplot-nox" in text, "time-to-find: the page without the plot names gnuplot-nox")
        equal(len(page.rows.get("ttf", [])), len(HUNT_FAULTS), "time-to-find: the table without gnuplot")
    finally:
        shutil.rmtree(bare)


def check_time_to_find_cap(scratch):
    """The first hunt (the fake sleeps 3.5 s) leaves less than one 3 s budget under the 6 s cap:
    every later hunt is 'not run (cap)', in the output, the tables and the page."""
    out = os.path.join(scratch, "time-to-find-cap")
    result = run_hunt_all(out, "--reps", "2", "--cap-minutes", "0.1", "--faults", " ".join(HUNT_FAULTS[:2]),
                          env={"FAKE_CAMPAIGN_SLEEP": "3.5"})
    equal(result.returncode, 1, f"time-to-find cap: exit ({result.stderr.strip()[-300:]})")
    equal(result.stderr.count(": not run (cap)"), 7, "time-to-find cap: hunts said to be cut off")
    check("Cap: 0.1 min for the whole run" in result.stdout, "time-to-find cap: the output says the cap")
    check("choice-level mutator on." in result.stdout, "time-to-find cap: the choice mutator is on by default")
    fake_env = os.path.join(out, "fuzzer", HUNT_FAULTS[0], "rep-1", "fake-env.txt")
    equal(open(fake_env, encoding="utf-8").read().strip(), "ZEROCHECK_CHOICE_MUTATOR=on",
          "time-to-find cap: the first hunt's choice mutator (the default)")
    with open(os.path.join(out, "time-to-find.json"), encoding="utf-8") as f:
        tables = json.load(f)
    equal(len(tables["cut_off"]), 7, "time-to-find cap: cut-off hunts in the JSON")
    first = tables["faults"][0]
    equal([first["fuzzer"]["found"], first["fuzzer"]["ran"], first["fuzzer"]["not_run_cap"]], [1, 1, 1],
          "time-to-find cap: the one hunt that ran")
    markdown = open(os.path.join(out, "table.md"), encoding="utf-8").read()
    check("| 1/1, 1 not run (cap) |" in markdown, "time-to-find cap: table.md shows the partly cut row")
    check("| `accept-repeated-initialize` | I5 | no | not run (cap) |  |  | not run (cap) |  |  |" in markdown,
          "time-to-find cap: table.md shows the wholly cut row")
    check("not run (cap): fuzzer rep 1: accept-repeated-initialize; random rep 1: every fault;" in markdown,
          "time-to-find cap: table.md's header lists the cut-off hunts")
    _, page = read_page(out)
    equal(page.by_id.get("cut-off", {}).get("data-count"), 7, "time-to-find cap: the page counts the cut-off hunts")


def check_usage(scratch):
    for args, fragment in (([], "needs a mode"), (["campaign"], "needs a mode"), (["bogus", scratch], "needs a mode"),
                           (["campaign", os.path.join(scratch, "missing")], "is not a folder"),
                           (["hunt", os.path.join(scratch, "reference")], "has no table.txt"),
                           (["time-to-find", os.path.join(scratch, "reference")], "has no hunts.tsv")):
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
        check_time_to_find(scratch)
        check_time_to_find_cap(scratch)
    finally:
        if os.environ.get("FUZZ_REPORT_TEST_KEEP"):
            print(f"kept {scratch}")
        else:
            shutil.rmtree(scratch)
    print(f"fuzz_report_test: {passes} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
