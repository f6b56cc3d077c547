"""The upstream regression suite: `python3 -m zerocheck_ds suite --scenarios PATH... --out DIR`.

A supervisor: it never imports torch or DeepSpeed itself. It replays every scenario on a pool of
rank processes (pool.py) that is reused while healthy, so DeepSpeed is imported once per batch;
a rank that crashes or a scenario that hangs gets its verdict and the run goes on on fresh
ranks. Afterwards findings are grouped by signature, compared with `--baseline`, shrunk to a
minimal scenario and a standalone script with `--shrink`, and written up in DIR/report.md and
DIR/summary.json.

Every signature is confirmed against its control (control.py) before it counts as upstream's;
root causes (root_causes.py) come first in the report, each with an issue draft
(DIR/issues/, issue_drafts.py).

With --json, stdout holds exactly one JSON document (summary.json, or {"format", "error",
"exit_code"} when the suite could not run): whatever the environment prints, at import too, goes
to stderr (`--json-fd N`: the document goes to file descriptor N, stdout is already elsewhere;
what `zerocheck upstream --json` uses).

Exit codes: 0 nothing found (with --baseline: nothing new), 1 a finding (with --baseline: a new
signature), 2 bad usage or input, or the ranks could not be started at all, 3 the suite itself
failed (a bug of the harness: the traceback is on stderr). Ctrl-C stops every rank, writes what
is done so far and exits 130.
"""

import argparse
import json
import os
import shutil
import signal
import sys
import traceback

from ..engines import ADAPTER_NAMES, deepspeed_adapter, deepspeed_tree
from ..engines.checkout import checkout_commit
from ..findings import baseline as baseline_module, issue_drafts, report
from ..findings.outcomes import (checks_of, outcome_findings, raising_steps, skipped_of, verdict,
                                 written_of)
from ..findings.verdict import NEW_INVARIANTS, merge_tallies, write_json
from ..oracles import inert_knobs
from ..scenario.config import precision_in_effect
from . import control, coverage
from .pool import PoolStartError, RankPool
from .runner import UsageError, load_all, scenario_files

PROG = "zerocheck_ds suite"
EXIT_OK, EXIT_FINDING, EXIT_USAGE, EXIT_SUITE_FAILED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog=PROG, description="Replay scenarios on an upstream engine on supervised rank "
                               "processes; group, baseline and shrink what they find.",
        epilog="exit codes: 0 nothing found (or nothing new against --baseline), 1 a finding "
               "(or a new one), 2 bad usage or input")
    p.add_argument("--scenarios", nargs="+", required=True, metavar="PATH",
                   help="scenario files, or folders of *.json scenario files")
    p.add_argument("--out", required=True, metavar="DIR", help="verdicts, logs, report")
    p.add_argument("--adapter", choices=ADAPTER_NAMES, default="deepspeed")
    p.add_argument("--world", type=int, default=1, help="ranks (processes on loopback), 1..8")
    p.add_argument("--stage", type=int, choices=(1, 2, 3), default=3,
                   help="the ZeRO stage to replay the scenarios with (default 3, the scenarios' own)")
    p.add_argument("--disable", default="", metavar="I3,I4,I6,I9,I10",
                   help="invariants not to check (of I3, I4, I6, I9, I10: they cost a dense twin, "
                        "checkpoint reads and two collectives per operation; I10 a second replay "
                        "of some scenarios)")
    p.add_argument("--ablate", action="store_true",
                   help="replay every scenario again with each of I3, I4, I6, I9 switched off in "
                        "turn: which scenarios only that invariant catches (summary.json "
                        "\"ablation\")")
    p.add_argument("--inert-fraction", type=float, default=inert_knobs.DEFAULT_FRACTION,
                   metavar="F", help="the fraction of scenarios replayed a second time with the "
                   "knobs that promise not to change the numbers drawn again (I10; chosen per "
                   "scenario, seeded by its name; default %(default)s)")
    p.add_argument("--inert-seed", type=int, default=0, metavar="N",
                   help="seeds which scenarios I10 chooses and their knobs' second draw")
    p.add_argument("--deepspeed-tree", metavar="DIR",
                   help="a DeepSpeed source tree to import (e.g. ../shared/deepspeed/v0.14.5); "
                        "default: the DeepSpeed installed for this Python")
    p.add_argument("--shims", metavar="DIR", help="put on PYTHONPATH before the tree "
                   "(default: the tree's ../shims when it exists)")
    p.add_argument("--scenario-timeout", type=float, default=120.0, metavar="SECONDS",
                   help="a scenario running longer is a hang (default 120)")
    p.add_argument("--batch", type=int, default=50, metavar="N",
                   help="scenarios per start of the ranks while healthy (1: one launch per "
                        "scenario; default 50)")
    p.add_argument("--baseline", metavar="DIR", help="an earlier --out: report fixed / new / "
                   "unchanged signatures and exit 1 only for new ones")
    p.add_argument("--shrink", action="store_true",
                   help="shrink one scenario per signature and write repro/<signature>.py")
    p.add_argument("--shrink-seconds", type=float, default=300.0, metavar="SECONDS",
                   help="time budget per signature (default 300)")
    p.add_argument("--keep-checkpoints", action="store_true",
                   help="keep each scenario's checkpoints in DIR/checkpoints/<scenario> (default: "
                        "removed once its verdict is written; the size is in the verdict)")
    p.add_argument("--reshard", action="store_true",
                   help="resume each load with a world_size on a second pool of that many ranks "
                        "from the engine's universal checkpoint and check I6 there (default: "
                        "not checked, counted under I6)")
    p.add_argument("--replay-command", default="", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true",
                   help="print summary.json on stdout, and nothing else there")
    p.add_argument("--json-fd", type=int, metavar="FD", help=argparse.SUPPRESS)
    p.add_argument("--no-audit", action="store_true",
                   help="do not audit attribute writes (no writer named in I1/I2 findings; "
                        "to measure what the audit costs)")
    p.add_argument("--coverage", metavar="FILE",
                   help="trace every rank and write which lines of the engine's code the "
                        "scenarios executed to FILE (JSON; a summary is printed; coverage.py)")
    p.add_argument("--coverage-of", default=",".join(coverage.DEFAULT_FILES), metavar="GLOBS",
                   help="the files --coverage measures, globs under the engine's package "
                        "(default: %(default)s)")
    p.add_argument("--no-control", action="store_true",
                   help="do not replay each signature on the pass-through engine first")
    args = p.parse_args(argv)
    if not 1 <= args.world <= 8:
        p.error("--world must be in 1..8")
    if args.batch < 1 or args.scenario_timeout <= 0 or args.shrink_seconds <= 0:
        p.error("--batch, --scenario-timeout and --shrink-seconds must be positive")
    if not 0.0 <= args.inert_fraction <= 1.0:
        p.error("--inert-fraction must be in [0, 1]")
    args.disabled = tuple(filter(None, args.disable.split(",")))
    for name in args.disabled:
        if name not in NEW_INVARIANTS:
            p.error(f"--disable {name}: only {', '.join(NEW_INVARIANTS)} can be switched off")
    return args


class Supervisor:
    """Pools by world size (shrinking may try world 1), and one call to replay a scenario."""

    def __init__(self, args, env, cwd, log, logs="logs"):
        self._args, self._env, self.cwd, self.log = args, env, cwd, log
        self._logs = logs
        self._pools = {}
        command = [sys.executable, "-m", "zerocheck_ds", "worker", "--adapter", args.adapter,
                   "--collective-timeout", f"{args.scenario_timeout:g}",
                   "--disable", ",".join(args.disabled)]
        if args.stage != 3:
            command += ["--stage", str(args.stage)]
        if args.no_audit:
            command.append("--no-audit")
        if getattr(args, "reshard", False):
            command.append("--reshard")
        self._command = command
        self.version = None
        self.versions = {}

    def pool(self, world_size):
        if world_size not in self._pools:
            logs = os.path.join(self._args.out, self._logs if world_size == self._args.world
                                else f"{self._logs}-world{world_size}")
            self._pools[world_size] = RankPool(world_size, self._command, self._env, self.cwd,
                                               logs)
        return self._pools[world_size]

    def replay(self, name, path, world_size, disable=None, extra=None):
        """Returns (Outcome, notes): a crash or hang on reused ranks is confirmed on fresh ones.
        `disable` replaces --disable for this replay; `extra` adds keys to the job (pool.run)."""
        pool = self.pool(world_size)
        if pool.running and pool.scenarios_on_these_ranks >= self._args.batch:
            pool.stop(grace=5)
        reused = pool.running
        outcome = self._run(pool, name, path, disable, extra)
        self.version = self.version or pool.version
        self.versions = self.versions or pool.versions
        notes = []
        if outcome.kind in ("crash", "hang") and reused:
            # The previous scenario may have left the ranks broken: judge this one alone.
            first = outcome
            outcome = self._run(pool, name, path, disable, extra)
            notes.append(f"on ranks reused from earlier scenarios it ended in a {first.kind}; "
                         f"rerun on fresh ranks: {outcome.kind}")
        if outcome.kind == "done" and len({tuple(s) for s in raising_steps(outcome)}) > 1:
            pool.stop()  # the ranks raised at different steps: collectives may be out of step
            notes.append("the ranks raised at different steps; they were restarted")
        return outcome, notes

    def _run(self, pool, name, path, disable, extra=None):
        """One replay in a fresh checkpoint folder, measured (outcome.checkpoint_bytes) and
        removed afterwards unless --keep-checkpoints, whatever the ranks did (a crashed rank's
        half-written checkpoint included)."""
        folder = checkpoints_folder(self._args.out, name)
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        try:
            outcome = pool.run(name, path, self._args.scenario_timeout, disable, folder,
                               extra=extra)
            if outcome.kind == "done" and outcome.per_rank:
                for request in outcome.per_rank[0].get("reshard", []):
                    self._resume(outcome, name, path, disable, request)
        finally:
            size = disk_bytes(folder)
            if not self._args.keep_checkpoints:
                shutil.rmtree(folder, ignore_errors=True)
        outcome.checkpoint_bytes = size
        return outcome

    def _resume(self, outcome, name, path, disable, request):
        """The second world of one load with a world_size (reshard.py), on a pool of that many
        ranks; what it finds, skips and counts joins the scenario's `outcome`, and
        outcome.reshards gets its row ({"op_index", "world_size", "outcome", "seconds"})."""
        world_size = request["world_size"]
        pool = self.pool(world_size)
        if pool.running and pool.scenarios_on_these_ranks >= self._args.batch:
            pool.stop(grace=5)
        try:
            resumed = pool.run(f"{name}~world{world_size}", path, self._args.scenario_timeout,
                               disable, resume=request)
        except PoolStartError as e:
            resumed = _start_failure(e)
        found = outcome_findings(resumed, self._args.scenario_timeout)
        where = f"in the world of {world_size} ranks resuming op {request['op_index']}"
        for f in found:
            if resumed.kind != "done":
                f["message"] = f"{where}: {f['message']}"
        outcome.resumed = getattr(outcome, "resumed", []) + found
        first = outcome.per_rank[0]
        if resumed.kind == "done":
            first["checks"] = merge_tallies([first.get("checks", {}),
                                             resumed.per_rank[0].get("checks", {})])
            first["skipped"] = first["skipped"] + resumed.per_rank[0]["skipped"]
        outcome.reshards = getattr(outcome, "reshards", []) + [{
            "op_index": request["op_index"], "world_size": world_size,
            "outcome": resumed.kind if resumed.kind != "done" else ("findings" if found else "ok"),
            "seconds": round(resumed.seconds, 3)}]

    def starts(self):
        return sum(p.starts for p in self._pools.values())

    def stop(self):
        for pool in self._pools.values():
            pool.stop(grace=5)


def checkpoints_folder(out, name):
    return os.path.join(out, "checkpoints", name)


def disk_bytes(folder):
    """Bytes of the files under `folder` (0 when there is none)."""
    total = 0
    for root, _, names in os.walk(folder):
        for n in names:
            try:
                total += os.lstat(os.path.join(root, n)).st_size
            except OSError:
                pass
    return total


def replay_environment(args):
    """(the ranks' environment, their working folder): the tree staged under OUT when given."""
    env = dict(os.environ)
    extra = [PACKAGE_ROOT]
    args.script_environment = {}
    cwd = None
    if args.deepspeed_tree:
        staged = deepspeed_tree.stage(args.deepspeed_tree,
                                      os.path.join(args.out, "deepspeed-tree"))
        shims = args.shims or deepspeed_tree.default_shims(args.deepspeed_tree)
        args.script_environment = deepspeed_tree.environment(staged, shims)
        tree_env = dict(args.script_environment)
        extra.append(tree_env.pop("PYTHONPATH"))
        env.update(tree_env)
        cwd = staged
    elif args.shims:
        extra.append(args.shims)
    if env.get("PYTHONPATH"):
        extra.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(extra)
    return env, cwd


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _json_stream(args):
    """With --json: the stream the one JSON document goes to. Anything else printed on stdout,
    by this process or what it imports (a sitecustomize's text still in the buffer included),
    goes to stderr from here on."""
    if not args.json:
        return None
    if args.json_fd is not None:
        return os.fdopen(args.json_fd, "w", encoding="utf-8")
    document = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout.flush()  # what was printed before, still buffered, now goes to stderr
    return document


def main(argv):
    args = parse_args(argv)
    args.out = os.path.abspath(args.out)
    document = _json_stream(args)
    try:
        code, summary = _main(args)
    except Exception as e:  # noqa: BLE001 - a bug of the suite itself: exit 3, said clearly
        traceback.print_exc()
        print(f"{PROG}: error: the suite itself failed: {type(e).__name__}: {e}", file=sys.stderr)
        code, summary = EXIT_SUITE_FAILED, None
    if document is not None:
        if summary is None:
            summary = {"format": report.SUMMARY_FORMAT, "exit_code": code,
                       "error": "the suite could not run; see stderr"}
        document.write(json.dumps(summary, indent=2, default=str) + "\n")
        document.flush()
    return code


def _main(args):
    """Returns (exit code, summary or None)."""
    log = (lambda text: print(text, file=sys.stderr, flush=True)) if args.json else (
        lambda text: print(text, flush=True))
    try:
        files = scenario_files(args.scenarios)
        scenarios = load_all(files)
        previous = baseline_module.load(args.baseline) if args.baseline else None
        os.makedirs(os.path.join(args.out, "verdicts"), exist_ok=True)
        env, cwd = replay_environment(args)
    except (UsageError, baseline_module.BaselineError, deepspeed_tree.TreeError, OSError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_USAGE, None
    signal.signal(signal.SIGTERM, _interrupt)
    coverage_files = tuple(filter(None, args.coverage_of.split(",")))
    rank_env = coverage.rank_environment(env, args.out, coverage_files) if args.coverage else env
    supervisor = Supervisor(args, rank_env, cwd, log)
    checker = Supervisor(control.control_args(args), env, cwd, log, logs="logs-control")
    run = report.Run(args=args, files=dict(zip((s.name for s in scenarios), map(os.path.abspath, files))))
    try:
        status = _replay_all(supervisor, scenarios, run)
        if status is not None:
            return status, None
        run.finish(supervisor.version, supervisor.starts())
        run.versions = dict(supervisor.versions)
        commit = checkout_commit(args.deepspeed_tree) if args.deepspeed_tree else None
        if commit:  # a tree that is its own checkout (checkout.py); none is no error
            run.versions["commit"] = commit
        if args.coverage:  # the replay's lines only: shrinking and the control come after
            coverage.write(args.out, args.coverage, coverage_files, supervisor.version,
                           len(scenarios), log)
        if args.shrink:
            from ..repro.minimise import minimise_all
            minimise_all(supervisor, run)
        if not args.no_control:
            control.confirm_all(checker, run)
        if previous is not None:
            _compare(run, previous)
    except KeyboardInterrupt:
        run.interrupted = True
        log(f"{PROG}: interrupted; stopping the ranks and writing what is done")
    finally:
        supervisor.stop()
        checker.stop()
        if not args.keep_checkpoints:
            try:  # each scenario's folder is gone already
                os.rmdir(os.path.join(args.out, "checkpoints"))
            except OSError:
                pass
    if not run.finished:
        run.finish(supervisor.version, supervisor.starts())
    summary = run.summary()
    issue_drafts.write_all(summary, args.out)
    write_json(os.path.join(args.out, "summary.json"), summary)
    report.write_markdown(os.path.join(args.out, "report.md"), run)
    if not args.json:
        for line in report.screen(run):
            print(line)
    if run.interrupted:
        return EXIT_INTERRUPTED, summary
    if run.baseline is not None:
        return (EXIT_FINDING if run.baseline["new"] else EXIT_OK), summary
    return (EXIT_FINDING if run.signature_counts() else EXIT_OK), summary


def _compare(run, previous):
    """Signatures (and root causes, when the baseline has them) against the baseline; the
    control's limits are not upstream's, so they are new in neither."""
    current = run.summary()
    limits = run.limits()
    for entry in current["scenarios"]:
        entry["signatures"] = [s for s in entry["signatures"] if s not in limits]
    run.baseline = baseline_module.compare(previous, current)
    if all("root_causes" in s for s in previous["scenarios"]):
        run.root_baseline = baseline_module.compare(previous, current, "root_causes")


def _replay_all(supervisor, scenarios, run):
    """Replays every scenario; returns an exit code only when the ranks never started."""
    args, log = run.args, supervisor.log
    log(f"{PROG}: {len(scenarios)} scenario(s), adapter {args.adapter}, world {args.world}, "
        f"timeout {args.scenario_timeout:g} s, logs in {os.path.join(args.out, 'logs')}")
    for i, scenario in enumerate(scenarios, 1):
        result = replay_scenario(supervisor, scenario, run)
        if result is None:
            return EXIT_USAGE
        log(report.progress_line(i, len(scenarios), result))
        if args.ablate:
            caught = sorted({f["invariant"] for f in result["findings"]})
            run.ablation[scenario.name] = {"all": caught or "none",
                                           **_ablate(supervisor, scenario.name,
                                                     run.files[scenario.name], args)}
    return None


def replay_scenario(supervisor, scenario, run):
    """Replays one scenario (run.files names its file) and judges it; writes its verdict to
    OUT/verdicts/ and adds it to `run`. Returns the verdict, or None when the ranks never
    started (said on stderr)."""
    args = run.args
    path = run.files[scenario.name]
    inert = ([], {}, {})
    try:
        outcome, notes, inert = _replay_judged(supervisor, scenario.name, path, args)
    except PoolStartError as e:
        if not run.verdicts:
            print(f"{PROG}: error: the ranks could not start ({args.adapter} adapter, "
                  f"{sys.executable}): {e}", file=sys.stderr)
            return None
        # They started before: a rank start that fails now is this scenario's crash.
        outcome, notes = _start_failure(e), ["the ranks could not be restarted"]
    findings = outcome_findings(outcome, args.scenario_timeout) + inert[0]
    checks = checks_of(outcome)
    if "I10" not in args.disabled:
        checks["I10"] = inert[1]
    result = verdict(scenario.name, args.adapter, supervisor.version, outcome, findings,
                     skipped_of(outcome), notes, stage=args.stage, checks=checks,
                     written=written_of(outcome))
    result["checkpoint_bytes"] = getattr(outcome, "checkpoint_bytes", 0)
    result["reshards"] = getattr(outcome, "reshards", [])
    result["inert_knobs"] = inert[2]  # I10's second draw: {knob: [old, new]}
    result["precision"] = precision_report(scenario.config, args.adapter, supervisor.version)
    write_json(os.path.join(args.out, "verdicts", f"{scenario.name}.verdict.json"), result)
    run.add(result)
    return result


def precision_report(config, adapter, version):
    """{dotted precision key: {"value", "source"}} in effect for the replayed DeepSpeed version:
    written by the scenario, set by the adapter when left out, or the version's default (value
    null: DeepSpeed derives it from bf16/fp16, or ignores the key)."""
    pinned = deepspeed_adapter.PINNED_WHEN_ABSENT if adapter == "deepspeed" else {}
    return {key: {"value": value, "source": source}
            for key, (value, source) in precision_in_effect(config, version, pinned).items()}


def _ablate(supervisor, name, path, args):
    """{invariant switched off: the invariants that still catch the scenario, or "survives"}: a
    real replay for each, on the same ranks."""
    row = {}
    for off in NEW_INVARIANTS:
        if off in args.disabled:
            continue
        outcome, _, inert = _replay_judged(supervisor, f"{name}~without-{off}", path, args,
                                           disable=sorted(set(args.disabled) | {off}), chosen_as=name)
        found = outcome_findings(outcome, args.scenario_timeout) + inert[0]
        caught = sorted({f["invariant"] for f in found})
        row[off] = caught or "survives"
    return row


def _traces(outcome):
    return [r.get("trace", []) for r in outcome.per_rank]


def _replay_judged(supervisor, name, path, args, disable=None, chosen_as=None):
    """Returns (Outcome, notes, (I10 findings, I10 tally, the knobs drawn again)): the scenario's
    replay and, when I10 is on and chooses it (inert_knobs.chosen, by `chosen_as` or `name`), a
    second replay with the knobs that promise not to change the numbers drawn again, both traced
    (replay/trace.py). A
    difference is confirmed by a third replay with the first one's knobs and a fourth with the
    second one's: when the third differs from the first, or the fourth from the second, the
    scenario is not deterministic and I10 is "not checked" with that reason."""
    path = os.path.abspath(path)
    disabled = set(args.disabled if disable is None else disable)
    key = chosen_as or name
    if "I10" in disabled:
        outcome, notes = supervisor.replay(name, path, args.world, disable=disable)
        return outcome, notes, ([], {}, {})
    if not inert_knobs.chosen(key, args.inert_fraction, args.inert_seed):
        outcome, notes = supervisor.replay(name, path, args.world, disable=disable)
        return outcome, notes, ([], _tally(None, f"not drawn for a second replay (fraction "
                                                 f"{args.inert_fraction:g})"), {})
    traced = {"trace": True}
    outcome, notes = supervisor.replay(name, path, args.world, disable=disable, extra=traced)
    if outcome.kind != "done":
        return outcome, notes, ([], _tally(None, f"the replay ended in a {outcome.kind}"), {})
    seed = inert_knobs.knob_seed(key, args.inert_seed)
    second, _ = supervisor.replay(f"{name}~inert-knobs", path, args.world, disable=disable,
                                  extra=dict(traced, knob_seed=seed))
    if second.kind != "done":
        found = outcome_findings(second, args.scenario_timeout)
        return outcome, notes, ([inert_knobs.ended(found[0], second.kind)], _tally(True), {})
    knobs = second.per_rank[0].get("knobs", {})
    changed = {k: tuple(v) for k, v in knobs.items()}
    if not changed:
        return outcome, notes, ([], _tally(None, "the second replay drew no knob: none is inert "
                                                 "at this stage, world and version "
                                                 "(inert_knobs.PROMISES), or it stopped before "
                                                 "the first operation"), {})
    where = inert_knobs.first_difference(_traces(outcome), _traces(second))
    if where is None:
        return outcome, notes, ([], _tally(True), knobs)
    unreadable = inert_knobs.unreadable(_traces(outcome), _traces(second), where)
    if unreadable:
        return outcome, notes, ([], _tally(None, f"the engine's state could not be read: "
                                                 f"{unreadable}"), knobs)
    control, _ = supervisor.replay(f"{name}~same-knobs", path, args.world, disable=disable,
                                   extra=traced)
    if control.kind != "done":
        return outcome, notes, ([], _tally(None, f"not deterministic: a replay with the same "
                                                 f"knobs ended in a {control.kind}"), knobs)
    again = inert_knobs.first_difference(_traces(outcome), _traces(control))
    if again is not None:
        return outcome, notes, ([], _tally(None, "not deterministic: a replay with the same knobs "
                                                 "differs too, first at " + inert_knobs.describe_difference(
                                                     _traces(outcome), again)), knobs)
    # The knobs are blamed only for a difference they give again: a race that struck the second
    # replay alone (DeepSpeed's Gloo all_gather race at a zero.Init, KNOWN_UPSTREAM.md) is not
    # theirs, and the rate test would see it come and go as an I10 finding with no cause.
    repeat, _ = supervisor.replay(f"{name}~inert-knobs-again", path, args.world, disable=disable,
                                  extra=dict(traced, knob_seed=seed))
    again_second = inert_knobs.first_difference(_traces(second), _traces(repeat))
    if repeat.kind != "done" or again_second is not None:
        return outcome, notes, ([], _tally(None, "not deterministic: a replay with the second "
                                                 "draw's knobs did not give that draw's "
                                                 "numbers again"), knobs)
    first = _traces(outcome)
    op_index = first[where[0]][where[1]].get("op_index") if where[1] < len(first[where[0]]) else None
    raised, raised_first = ((), None), False
    if where[2] == "errors":  # what one of the replays raised there, and where
        raised = inert_knobs.raised_at([r["findings"] for r in second.per_rank], op_index)
        if not raised[0]:
            raised = inert_knobs.raised_at([r["findings"] for r in outcome.per_rank], op_index)
            raised_first = True
    return outcome, notes, ([inert_knobs.finding(first, _traces(second), changed, where, raised,
                                                 raised_first)], _tally(True), knobs)


def _tally(checked, reason=None):
    """One scenario's I10 tally (findings/verdict.Tally's form)."""
    return {"checked": 1 if checked else 0, "not_checked": {reason: 1} if reason else {}}


def _start_failure(error):
    from .pool import Outcome
    return Outcome("crash", last_steps=[], rank=0, how=f"could not start: {error}")
