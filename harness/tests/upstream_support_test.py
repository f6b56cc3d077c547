"""ctest `upstream_support_rules` (label unit): the rules the upstream ctests judge by, without
DeepSpeed. A root cause seen once is excused only when every scenario showing it comes back without
an untriaged cause on a lone replay; one that comes back every time stays and fails the test."""

import os
import sys
import tempfile
import unittest

import upstream_support as support


def summary(*causes):
    return {"root_causes": [{"title": t, "invariant": t.split()[0].rstrip(":"), "scenarios": list(s)}
                            for t, s in causes]}


class ExcusedByReplays(unittest.TestCase):
    TABLE = {"I3 step: known": "DeepSpeed bug"}

    def replays(self, by_name):
        calls = []

        def replay(name, attempt):
            calls.append((name, attempt))
            return by_name[name][attempt - 1]
        return replay, calls

    def test_a_cause_gone_on_a_replay_is_excused_and_one_that_comes_back_is_not(self):
        run = summary(("I9 save: whole_copy", ["a"]), ("I3 step: x", ["b"]),
                      ("I3 step: known", ["a", "b"]), ("I1: written by y", ["c"]))
        replay, calls = self.replays({
            "a": [summary(("I3 step: known", ["a"]))],
            "b": [summary(("I3 step: x", ["b"]))] * 2})
        excused = support.excused_by_replays(run, self.TABLE, replay)
        self.assertEqual(excused, {"I9 save: whole_copy"})
        self.assertEqual(calls, [("a", 1), ("b", 1), ("b", 2)])  # I1 is not judged here

    def test_a_cause_of_two_scenarios_needs_both_to_come_back_clean(self):
        run = summary(("I6 load: v", ["a", "b"]))
        replay, _ = self.replays({"a": [summary()], "b": [summary(("I6 load: v", ["b"]))] * 2})
        self.assertEqual(support.excused_by_replays(run, self.TABLE, replay), set())
        replay, calls = self.replays({"a": [summary()],
                                      "b": [summary(("I6 load: v", ["b"])), summary()]})
        self.assertEqual(support.excused_by_replays(run, self.TABLE, replay), {"I6 load: v"})
        self.assertEqual(calls, [("a", 1), ("b", 1), ("b", 2)])

    def test_scenario_files_names_files_and_folders_content(self):
        with tempfile.TemporaryDirectory() as folder:
            for name in ("one.json", "two.json", "notes.txt"):
                open(os.path.join(folder, name), "w").close()
            lone = os.path.join(folder, "one.json")
            self.assertEqual(support.scenario_files([folder, lone]),
                             {"one": lone, "two": os.path.join(folder, "two.json")})


if __name__ == "__main__":
    sys.exit(unittest.main())
