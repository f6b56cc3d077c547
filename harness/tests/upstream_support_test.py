"""ctest `upstream_support_rules` (label unit): the rules the upstream ctests judge by, without
DeepSpeed. Flaky is a verdict, not a retry: a scenario that needs a second look is replayed apart
every one of REPLAYS times (never stopped at the first replay that passes), and each finding is
judged by its rate: one that comes and goes passes only on a row of KNOWN_UPSTREAM.md that triages
it as nondeterministic; one seen every time is judged as deterministic, and fails on such a row
(a cause of such a row seen in every run so far gets up to EXTRA_REPLAYS more runs, stopping at
the first it spares)."""

import json
from dataclasses import asdict
import os
import sys
import tempfile
import unittest

import upstream_checkpoints_test as checkpoints
import upstream_rates as rates
import upstream_support as support

RACE = "I9 step: whole_copy"
ROWS = {"I3 step: known": "DeepSpeed bug | v0.14.5; master",
        RACE: "DeepSpeed bug | v0.14.5, master: nondeterministic, not in every run"}


def summary(*causes, limits=()):
    return {"root_causes": [{"title": t, "invariant": t.split()[0].rstrip(":"),
                             "scenarios": list(s), "signatures": [t + " sig"]}
                            for t, s in causes],
            "limits": [{"signature": sig, "scenarios": list(s)} for sig, s in limits]}


class Replays:
    """A replay(names, attempt) that answers from a script of runs per scenario ({name: [run of
    attempt 1, ...]}), and records its calls."""

    def __init__(self, by_name, combine=None):
        self.by_name, self.calls, self.combine = by_name, [], combine

    def __call__(self, names, attempt):
        self.calls.append((tuple(names), attempt))
        found = {name: self.by_name[name][attempt - 1] for name in names}
        return self.combine(found) if self.combine else found


def merged(by_name):
    """One summary of the scenarios' summaries, as one run of them together writes it."""
    return {"root_causes": [c for s in by_name.values() for c in s["root_causes"]],
            "limits": [lim for s in by_name.values() for lim in s["limits"]]}


class JudgeNewCauses(unittest.TestCase):
    def judge(self, run, by_name):
        replay = Replays(by_name, merged)
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "rates.json")
            failures, passed = support.judge_new_causes(run, ROWS, replay, path)
            with open(path, encoding="utf-8") as f:
                written = json.load(f)
        return failures, passed, replay.calls, written

    def test_a_race_that_comes_and_goes_passes_with_its_rate_after_every_replay(self):
        run = summary((RACE, ["a"]), ("I3 step: known", ["a", "b"]), ("I1: written by y", ["c"]))
        clean, raced = summary(("I3 step: known", ["a"])), summary((RACE, ["a"]),
                                                                   ("I3 step: known", ["a"]))
        failures, passed, calls, written = self.judge(run, {"a": [clean, clean, raced]})
        self.assertEqual(failures, [])
        self.assertEqual(calls, [(("a",), 1), (("a",), 2), (("a",), 3)])  # all, none after a pass
        self.assertEqual([(r.scenario, r.finding, r.seen, r.runs) for r in passed],
                         [("a", RACE, 2, 4)])
        self.assertEqual(str(passed[0]), f"{RACE!r} in a: seen in 2 of 4 runs "
                                         "(the suite's and 3 replays)")
        self.assertIn({"scenario": "a", "finding": RACE, "seen": 2, "runs": 4, "struck": [],
                       "with_them": False, "row": ROWS[RACE]}, written)

    def test_an_untriaged_cause_fails_whether_it_comes_back_or_not(self):
        run = summary(("I3 step: x", ["a", "b"]))
        failures, passed, calls, _ = self.judge(run, {
            "a": [summary()] * 3, "b": [summary(("I3 step: x", ["b"]))] * 3})
        self.assertEqual(calls, [(("a", "b"), 1), (("a", "b"), 2), (("a", "b"), 3)])  # together
        self.assertEqual(passed, [])
        self.assertEqual(len(failures), 2)
        self.assertIn("in a: seen in 1 of 4 runs", failures[0])
        self.assertIn("nondeterministic, and no row", failures[0])
        self.assertIn("in b: seen in 4 of 4 runs", failures[1])
        self.assertIn("not triaged in KNOWN_UPSTREAM.md (deterministic)", failures[1])

    def test_a_race_row_does_not_cover_a_cause_that_comes_back_every_time(self):
        replays = rates.REPLAYS + rates.EXTRA_REPLAYS
        failures, passed, calls, _ = self.judge(summary((RACE, ["a"])),
                                                {"a": [summary((RACE, ["a"]))] * replays})
        self.assertEqual(passed, [])
        self.assertEqual(len(calls), replays)  # every extra replay, none spared
        self.assertEqual(len(failures), 1)
        self.assertIn(f"seen in {replays + 1} of {replays + 1} runs", failures[0])
        self.assertIn("a deterministic bug under that row?", failures[0])

    def test_a_race_in_every_run_so_far_is_replayed_again_until_a_run_it_spares(self):
        raced, clean, raced_b = summary((RACE, ["a"])), summary(), summary((RACE, ["b"]))
        run = summary((RACE, ["a", "b"]))
        failures, passed, calls, _ = self.judge(run, {
            "a": [raced] * 4 + [clean] + [raced] * 4, "b": [raced_b, clean, raced_b]})
        self.assertEqual(failures, [])
        # b was spared at its first replay: only a goes on, and stops at the run it spares.
        self.assertEqual(calls, [(("a", "b"), 1), (("a", "b"), 2), (("a", "b"), 3),
                                 (("a",), 4), (("a",), 5)])
        self.assertEqual([(r.scenario, r.seen, r.runs) for r in passed], [("a", 5, 6), ("b", 3, 4)])

    def test_a_deterministic_bug_that_comes_and_goes_is_not_covered_by_its_row(self):
        # The stale-gradient row is a deterministic bug's: seen in some runs only, it is not it.
        run = summary(("I3 step: known", ["a"]), ("I3 step: x", ["a"]))
        failures, _, _, _ = self.judge(run, {"a": [summary(("I3 step: x", ["a"]))] * 3})
        self.assertTrue(any("'I3 step: known' in a: seen in 1 of 4 runs" in f
                            and "(its row: DeepSpeed bug | v0.14.5; master)" in f
                            for f in failures), failures)

    def test_what_comes_only_with_a_race_is_its_consequence_and_what_it_hides_is_masked(self):
        # "I3 step: known" shows only where the race struck in b, and is missing only from the
        # runs where it struck in c (I3 names the first place the twin parts).
        known, raced = summary(("I3 step: known", ["s"])), summary((RACE, ["s"]),
                                                                   ("I3 step: known", ["s"]))
        alone = summary((RACE, ["s"]))
        failures, passed, _, _ = self.judge(raced, {"s": [summary(), raced, summary()]})
        self.assertEqual(failures, [])
        self.assertIn(f"'I3 step: known' in s: seen in 2 of 4 runs (the suite's and 3 replays, "
                      f"only in runs where ['{RACE}'] struck)", list(map(str, passed)))
        failures, passed, _, _ = self.judge(alone, {"s": [known, alone, known]})
        self.assertEqual(failures, [])
        self.assertEqual([(r.finding, r.seen) for r in passed], [(RACE, 2)])
        # Missing from a run the race did not strike: nondeterministic on its own.
        failures, _, _, _ = self.judge(raced, {"s": [known, summary(), known]})
        self.assertIn("'I3 step: known' in s: seen in 3 of 4 runs (the suite's and 3 replays): "
                      "nondeterministic", failures[0])

    def test_a_triaged_deterministic_cause_is_not_replayed(self):
        failures, passed, calls, written = self.judge(summary(("I3 step: known", ["a"])), {})
        self.assertEqual((failures, passed, calls, written), ([], [], [], []))


class ShownOrMasked(unittest.TestCase):
    """A deterministic cause that a race masked in the suite's run is still shown (its check must
    not fail on the race), but only when the replays show it wherever the race did not strike."""
    DOC = "I3 step: documented"

    def rates_of(self, runs):
        rows = dict(ROWS, **{self.DOC: "documented behaviour | v0.14.5; master"})
        return [dict(asdict(r), row=rows.get(r.finding))
                for r in rates.rates_of("a", runs, rows)]

    def test_shown_in_the_first_run(self):
        self.assertIsNone(rates.shown_or_masked(self.DOC, "a", [self.DOC + ": where"], []))

    def test_masked_by_a_race_in_the_first_run_and_shown_in_the_replays(self):
        written = self.rates_of([{RACE}, {self.DOC}, {self.DOC}, {self.DOC}])
        self.assertIsNone(rates.shown_or_masked(self.DOC, "a", [RACE], written))

    def test_missing_where_no_race_struck_fails(self):
        written = self.rates_of([{RACE}, {self.DOC}, set(), {self.DOC}])
        why = rates.shown_or_masked(self.DOC, "a", [RACE], written)
        self.assertIn("does not show", why)
        self.assertIn("seen': 2", why)
        self.assertIn("does not show", rates.shown_or_masked(self.DOC, "a", [RACE],
                                                             self.rates_of([{RACE}] * 4)))


class Judge(unittest.TestCase):
    def test_each_rule(self):
        every, some = rates.Rate("s", "f", 4, 4), rates.Rate("s", "f", 1, 4)
        race, bug = ROWS[RACE], ROWS["I3 step: known"]
        self.assertIsNone(rates.judge(some, race, needs_row=True, must_be_absent=True))
        self.assertIn("deterministic bug under that row", rates.judge(every, race))
        self.assertIsNone(rates.judge(every, bug, needs_row=True))
        self.assertIn("in a scenario that holds (deterministic)",
                      rates.judge(every, bug, must_be_absent=True))
        self.assertIn("not triaged", rates.judge(every, None, needs_row=True))
        self.assertIn("no row of KNOWN_UPSTREAM.md triages it",
                      rates.judge(some, bug, needs_row=True))
        self.assertIn("no row of KNOWN_UPSTREAM.md triages it",
                      rates.judge(some, None, must_be_absent=True))
        self.assertIsNone(rates.judge(some, None))  # a finding this test does not judge
        self.assertIsNone(rates.judge(every, None))

    def test_the_rows_that_say_nondeterministic_by_their_columns(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "KNOWN.md")
            with open(path, "w", encoding="utf-8") as f:
                f.write("| root cause | seen on | verdict | why |\n| --- | --- | --- | --- |\n"
                        "| `I9 step: race` | v0.14.5: nondeterministic | DeepSpeed bug | a race |\n"
                        "| `I3 step: bug` | v0.14.5 | DeepSpeed bug | not nondeterministic |\n\n"
                        "| what | v0.14.5 |\n| --- | --- |\n| `gather` | nondeterministic |\n")
            rows = support.triage_rows(path)
        self.assertEqual(rows, {"I9 step: race": "DeepSpeed bug | v0.14.5: nondeterministic",
                                "I3 step: bug": "DeepSpeed bug | v0.14.5"})
        self.assertTrue(rates.is_nondeterministic(rows["I9 step: race"]))
        self.assertFalse(rates.is_nondeterministic(rows["I3 step: bug"]))  # its why is not read
        self.assertFalse(rates.is_nondeterministic(None))
        # KNOWN_UPSTREAM.md itself has rows of both kinds (the Gloo all_gather race's).
        known = support.triage_rows().values()
        self.assertTrue(any(map(rates.is_nondeterministic, known)))
        self.assertFalse(all(map(rates.is_nondeterministic, known)))


class CheckpointScenarios(unittest.TestCase):
    """upstream_checkpoints_test.judged on made-up runs: (verdict, summary) per run."""

    @staticmethod
    def run_of(name, *titles, outcome=None, extra=()):
        sums = summary(*((t, [name]) for t in titles))
        sigs = [t + " sig" for t in titles] + list(extra)
        verdict = {"outcome": outcome or ("findings" if sigs else "ok"),
                   "findings": [{"signature": s} for s in sigs]}
        return verdict, sums

    def judged(self, name, first, runs, holds=(), shows=None):
        replay = Replays({name: runs})
        result, found = checkpoints.judged({name: first}, replay, list(holds), shows or {}, ROWS)
        return result[name], [(r.finding, r.seen, r.runs) for r in found], replay.calls

    def test_only_the_scenarios_that_need_a_second_look_are_replayed_together(self):
        firsts = {"ok": self.run_of("ok"), "r1": self.run_of("r1", RACE),
                  "r2": self.run_of("r2", RACE)}
        every = rates.REPLAYS + rates.EXTRA_REPLAYS
        replay = Replays({"r1": [self.run_of("r1")] * 3, "r2": [self.run_of("r2", RACE)] * every})
        result, found = checkpoints.judged(firsts, replay, ["ok", "r1", "r2"], {}, ROWS)
        self.assertEqual(replay.calls, [(("r1", "r2"), 1), (("r1", "r2"), 2), (("r1", "r2"), 3)]
                         + [(("r2",), n) for n in range(4, every + 1)])
        self.assertEqual([(r.scenario, r.seen, r.runs) for r in found],
                         [("r1", 1, 4), ("r2", every + 1, every + 1)])
        self.assertEqual((result["ok"], result["r1"]), ([], []))
        self.assertIn("a deterministic bug under that row?", result["r2"][0])

    def test_a_scenario_that_holds_passes_a_race_with_its_rate_and_fails_anything_else(self):
        first = self.run_of("h", RACE)
        wrong, found, calls = self.judged("h", first, [self.run_of("h")] * 3, holds=["h"])
        self.assertEqual((wrong, found, len(calls)), ([], [(RACE, 1, 4)], 3))
        # What the race brings with it (the consolidation differing from the twin) passes too;
        # what it hides in a scenario that must hold does not.
        wrong, found, _ = self.judged("h", self.run_of("h", RACE, "I3 step: known"),
                                      [self.run_of("h")] * 3, holds=["h"])
        self.assertEqual((wrong, found), ([], [("I3 step: known", 1, 4), (RACE, 1, 4)]))
        wrong, _, _ = self.judged("h", self.run_of("h", RACE),
                                  [self.run_of("h", "I3 step: known")] * 3, holds=["h"])
        self.assertIn("in a scenario that holds (deterministic)", wrong[0])
        wrong, found, _ = self.judged("h", self.run_of("h", "I3 step: known"),
                                      [self.run_of("h")] * 3, holds=["h"])
        self.assertEqual(found, [("I3 step: known", 1, 4)])
        self.assertIn("nondeterministic, and no row", wrong[0])
        # A crash in a replay is a finding of a scenario that holds.
        wrong, found, _ = self.judged("h", first, [self.run_of("h"), self.run_of("h"),
                                                   self.run_of("h", outcome="crash",
                                                               extra=["crash: rank 1 died"])],
                                      holds=["h"])
        self.assertTrue(any("'crash: rank 1 died' in h: seen in 1 of 4" in w for w in wrong), wrong)

    def test_what_a_scenario_shows_must_show_in_every_run(self):
        shows = {"s": ("I3", "known sig")}
        first = self.run_of("s", "I3 step: known")
        self.assertEqual(self.judged("s", first, [], shows=shows), ([], [], []))  # no second look
        again = self.run_of("s", RACE, "I3 step: known")
        wrong, _, calls = self.judged("s", again, [first, self.run_of("s"), first], shows=shows)
        self.assertEqual(len(calls), 3)
        # The cause it shows, gone from one run, is no longer the deterministic bug of its row.
        self.assertEqual(len(wrong), 2, wrong)
        self.assertIn("'I3 step: known' in s: seen in 3 of 4 runs", wrong[0])
        self.assertEqual(wrong[1], "s shows I3 'known sig' in 2 of the 3 runs no "
                                   "nondeterministic cause struck (4 runs: the suite's and 3 "
                                   "replays)")
        # Missing only where a race struck (it left other values there): shown.
        wrong, _, _ = self.judged("s", self.run_of("s", RACE), [first] * 3, shows=shows)
        self.assertEqual(wrong, [])
        # A race in every run leaves nothing to judge it on.
        wrong, _, _ = self.judged("s", again, [again] * (rates.REPLAYS + rates.EXTRA_REPLAYS),
                                  shows=shows)
        self.assertIn("in 0 of the 0 runs no nondeterministic cause struck", wrong[-1])

    def test_findings_of_a_run_name_causes_limits_and_the_rest(self):
        sums = summary(("I3 step: known", ["a"]), limits=[("op forward: RecursionError", ["a"])])
        verdict = {"findings": [{"signature": s} for s in
                                ("I3 step: known sig", "op forward: RecursionError", "hang: op 3")]}
        self.assertEqual(checkpoints.findings_of("a", verdict, sums),
                         {"I3 step: known", "limit of the replay: op forward: RecursionError",
                          "hang: op 3"})

    def test_scenario_files_names_files_and_folders_content(self):
        with tempfile.TemporaryDirectory() as folder:
            for name in ("one.json", "two.json", "notes.txt"):
                open(os.path.join(folder, name), "w").close()
            lone = os.path.join(folder, "one.json")
            self.assertEqual(support.scenario_files([folder, lone]),
                             {"one": lone, "two": os.path.join(folder, "two.json")})


if __name__ == "__main__":
    sys.exit(unittest.main())
