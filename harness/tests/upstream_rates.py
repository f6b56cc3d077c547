"""Flaky is a verdict, not a retry: how the upstream ctests judge a finding that comes and goes.

A scenario whose first run needs a second look (a check failed, or it shows a cause that
KNOWN_UPSTREAM.md triages as nondeterministic) is replayed apart from the suite's other scenarios
REPLAYS times, every one of them: a rate needs them all, and no test stops at the first replay
that passes. One whose nondeterministic cause struck in every run so far gets up to
EXTRA_REPLAYS more, until a run it spares. Each finding is
then judged by its rate over the runs (the suite's and the replays):
  - seen in every run, it is deterministic and judged as the first run was: a scenario that must
    hold fails on it, an untriaged I3/I4/I6/I9 cause fails, and a cause whose row says
    "nondeterministic" fails too (a deterministic bug landing on a race's row);
  - seen in some runs, it is nondeterministic: where the test judges it at all, it passes only
    when KNOWN_UPSTREAM.md's row of its cause triages it as nondeterministic (the row gives its
    own cause), never on a row of a deterministic bug; its rate is printed and written down;
  - one that comes and goes only with such a cause is explained by it: seen only in the runs
    where it struck, a consequence (judged as that cause); missing only from them, masked
    (judged as deterministic).
"""

import json
from dataclasses import asdict, dataclass

# Lone replays of a scenario that needs a second look. A race seen in a third of the runs comes
# back in all three about one time in 27; with the first run that makes 4.
REPLAYS = 3
# More lone replays, at most, of a scenario whose nondeterministic cause struck in every run so
# far, stopping at the first run it spares: a race striking half the runs (gather_modifier_rank_0
# at ctest -j2 with the rank processes' imports frozen: 2 of 4, 2026-12-06) strikes 4 runs in a
# row one time in 16, 10 runs one time in 1024. Seen in all of them, it is judged deterministic.
EXTRA_REPLAYS = 6
# The word a KNOWN_UPSTREAM.md row holds (verdict or "seen on") when its cause is nondeterministic.
NONDETERMINISTIC = "nondeterministic"


def is_nondeterministic(row):
    """Whether a row of KNOWN_UPSTREAM.md (its verdict and "seen on" text; None: no row) triages
    its cause as nondeterministic."""
    return row is not None and NONDETERMINISTIC in row


@dataclass(frozen=True)
class Rate:
    """`finding` of `scenario` seen in `seen` of `runs` runs (the first and the replays).
    `struck`: the nondeterministic causes that explain why it comes and goes, when it does only
    with them: `with_them` seen only in runs where one of them struck (their consequence, as the
    twin parting at a race's initialize shows in that scenario's consolidation too), else missing
    only from such runs (masked: I3 names the first place the twin parts, and the race's came
    first)."""

    scenario: str
    finding: str
    seen: int
    runs: int
    struck: tuple = ()
    with_them: bool = False

    @property
    def deterministic(self):
        return self.seen == self.runs or (bool(self.struck) and not self.with_them)

    def __str__(self):
        why = ""
        if self.struck:
            why = (f", only in runs where {list(self.struck)} struck" if self.with_them
                   else f", missing only from runs where {list(self.struck)} struck")
        return (f"{self.finding!r} in {self.scenario}: seen in {self.seen} of {self.runs} runs "
                f"(the suite's and {self.runs - 1} replays{why})")


def replayed(firsts, replay, replays=REPLAYS, rows=None):
    """{name: [the findings of its first run, then of each replay]} for the scenarios of `firsts`
    ({name: (findings of its first run, why it needs a second look)}), replayed apart from the rest
    of the suite, together (one start of the ranks per replay keeps the time bounded), every one of
    `replays` times: replay(names, attempt) -> {name: findings}. With `rows` (KNOWN_UPSTREAM.md's,
    upstream_support.triage_rows), a scenario where a cause those rows triage as nondeterministic
    struck in every run so far is replayed again, up to EXTRA_REPLAYS times, until a run it spares
    (a rate below one is all that tells a race from a deterministic bug under its row; nothing
    else stops early). Prints each run's findings."""
    names = sorted(firsts)
    runs = {name: [set(firsts[name][0])] for name in names}
    for name in names:
        print(f"{name}: replayed {replays} times ({firsts[name][1]}); its run showed "
              f"{sorted(runs[name][0])}")

    def once(now, attempt, of):
        found = replay(now, attempt)
        for name in now:
            runs[name].append(set(found[name]))
            print(f"replay {attempt} of {of} of {name}: {sorted(runs[name][-1]) or 'nothing'}")
    for attempt in range(1, replays + 1) if names else ():
        once(names, attempt, replays)
    for attempt in range(replays + 1, replays + EXTRA_REPLAYS + 1) if rows is not None else ():
        unspared = [name for name in names if struck_every_time(runs[name], rows)]
        if not unspared:
            break
        print(f"{unspared}: a nondeterministic cause struck in each of their runs so far; "
              f"replayed again (at most {replays + EXTRA_REPLAYS} replays)")
        once(unspared, attempt, replays + EXTRA_REPLAYS)
    return runs


def struck_every_time(runs, rows):
    """The causes `rows` triage as nondeterministic that are in every one of `runs` (sets)."""
    return sorted(f for f in set.intersection(*runs) if is_nondeterministic(rows.get(f)))


def rates_of(name, runs, rows):
    """The Rate of every finding seen in any of `runs` (sets of findings) of scenario `name`; one
    that comes and goes only with a cause `rows` triages as nondeterministic says which."""
    rates = []
    for finding in sorted(set().union(*runs)):
        seen = [finding in run for run in runs]
        rate = Rate(name, finding, sum(seen), len(runs))
        if 0 < rate.seen < rate.runs and not is_nondeterministic(rows.get(finding)):
            for with_them in (True, False):
                odd = [run for run, there in zip(runs, seen) if there == with_them]
                struck = [sorted(f for f in run if is_nondeterministic(rows.get(f))) for run in odd]
                if all(struck):
                    rate = Rate(name, finding, rate.seen, rate.runs,
                                tuple(sorted(set().union(*map(set, struck)))), with_them)
                    break
        rates.append(rate)
    return rates


def judge(rate, row, needs_row=False, must_be_absent=False):
    """Why `rate` fails its test, or None when it passes. `row`: the verdict and "seen on" text of
    KNOWN_UPSTREAM.md's row of the finding's cause (None: no row); `needs_row`: the test fails on
    an untriaged finding of this kind; `must_be_absent`: the scenario must hold."""
    if rate.with_them:
        return None  # judged as the nondeterministic causes it comes with
    if is_nondeterministic(row):
        if rate.deterministic:
            return (f"{rate}: its row triages a nondeterministic cause, and it came back every "
                    f"time: a deterministic bug under that row?")
        return None
    if rate.deterministic:
        if needs_row and row is None:
            return f"{rate}: not triaged in KNOWN_UPSTREAM.md (deterministic)"
        if must_be_absent:
            return f"{rate}: in a scenario that holds (deterministic)"
        return None
    if needs_row or must_be_absent:
        return (f"{rate}: nondeterministic, and no row of KNOWN_UPSTREAM.md triages it as "
                f"nondeterministic with its cause" + (f" (its row: {row})" if row else ""))
    return None


def report(rates, rows, path):
    """Prints the nondeterministic findings that passed (triaged as such) with their rates and
    writes every judged rate to `path` (JSON: scenario, finding, seen, runs, row); returns the
    nondeterministic ones."""
    passed = [r for r in rates if not r.deterministic
              and (r.with_them or is_nondeterministic(rows.get(r.finding)))]
    for rate in passed:
        print(f"nondeterministic, triaged as such: {rate}")
    with open(path, "w", encoding="utf-8") as f:
        json.dump([dict(asdict(r), row=rows.get(r.finding)) for r in rates], f, indent=1)
    return passed


def shown_or_masked(prefix, name, first, written):
    """Why scenario `name` fails to show its expected root cause (a title starting with `prefix`),
    or None when it shows it. `first`: the titles of its first run's causes; `written`: the rates
    report() wrote (dicts). A deterministic cause is shown in the first run, or, where a
    nondeterministic cause struck there first (I3 names only the first place the twin parts), in
    every run it did not strike (masked, so judged deterministic), at least once."""
    if any(t.startswith(prefix) for t in first):
        return None
    masked = [r for r in written if r["scenario"] == name and r["finding"].startswith(prefix)
              and r["struck"] and not r["with_them"] and r["seen"] > 0]
    if masked:
        print(f"{name}: {prefix!r} masked in the first run, shown in {masked[0]['seen']} of "
              f"{masked[0]['runs']} runs: missing only where {masked[0]['struck']} struck")
        return None
    seen = [r for r in written if r["scenario"] == name and r["finding"].startswith(prefix)]
    return (f"{name} does not show {prefix!r}: its first run showed {sorted(first)}"
            + (f"; its rate: {seen[0]}" if seen else
               ", and no replay showed it only where a nondeterministic cause was missing"))
