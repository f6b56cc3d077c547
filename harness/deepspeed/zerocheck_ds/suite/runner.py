"""The command line: replay scenario files on an adapter and write one verdict per scenario.

    python3 -m zerocheck_ds --scenarios DIR_OR_FILE... --out DIR
                            [--adapter deepspeed|passthrough|faulty] [--any-world]

Exit codes: 0 every invariant held, 1 a finding, 2 bad usage or input (a malformed scenario,
DeepSpeed not importable, an inconsistent distributed environment, a scenario whose world_size
is not the number of ranks running it). Every scenario is read before anything runs, and before
torch is imported, so bad input fails fast. Under torchrun (or RANK/WORLD_SIZE/MASTER_ADDR/
MASTER_PORT) every rank replays; rank 0 writes the files.
"""

import argparse
import os
import shutil
import sys
import traceback

from ..engines import ADAPTER_NAMES
from ..scenario.scenario import ScenarioError, load_scenario

PROG = "zerocheck_ds"
EXIT_OK, EXIT_FINDING, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    pass


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Replay zerocheck scenarios on an upstream ZeRO-3 engine and check the "
                    "invariants I1 (user attributes), I2 (placement), I3 (numbers against a dense "
                    "twin), I4 (partitions), I5 (repeated initialize), I9 (ranks agree).",
        epilog="exit codes: 0 all invariants held, 1 a finding, 2 bad usage or input")
    parser.add_argument("--scenarios", nargs="+", required=True, metavar="PATH",
                        help="scenario files, or directories whose *.json files are scenarios")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="where <scenario>.verdict.json and summary.json are written")
    parser.add_argument("--adapter", choices=ADAPTER_NAMES, default="deepspeed",
                        help="engine under test (default: deepspeed)")
    parser.add_argument("--stage", type=int, choices=(1, 2, 3), default=None,
                        help="replay with this ZeRO stage instead of the scenarios' (3)")
    parser.add_argument("--any-world", action="store_true",
                        help="replay scenarios whose world_size differs from the ranks running "
                             "them (placement keeps the scenario's; noted under skipped): a "
                             "test's view of one rank, not DeepSpeed's behaviour at that world")
    return parser.parse_args(argv)


def scenario_files(paths):
    """Returns the scenario files named by `paths` (directories: their *.json, sorted)."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".json"))
            if not found:
                raise UsageError(f"{path}: directory holds no *.json scenario files")
            files += found
        elif os.path.exists(path):
            files.append(path)
        else:
            raise UsageError(f"{path}: no such file or directory")
    return files


def load_all(files):
    scenarios, origin = [], {}
    for path in files:
        try:
            scenario = load_scenario(path)
        except ScenarioError as e:
            raise UsageError(f"{path}: {e}") from None
        if scenario.name in origin:
            raise UsageError(f"{path}: scenario name {scenario.name!r} is also used by "
                             f"{origin[scenario.name]}; verdict files would collide")
        origin[scenario.name] = path
        scenarios.append(scenario)
    return scenarios


def check_world_sizes(files, scenarios, world_size):
    """Raises UsageError naming every scenario file whose world_size is not `world_size`, the
    number of ranks running it: replayed on other ranks, a scenario's operations name ranks that
    do not exist (a gather's modifier rank 1 on one rank), and what fails is the invocation, not
    the engine."""
    ranks = "1 rank runs" if world_size == 1 else f"{world_size} ranks run"
    size = os.environ.get("WORLD_SIZE")
    wrong = [f"{path}: world_size {s.world_size}, but {ranks} it "
             f"({'WORLD_SIZE=' + size if size else 'WORLD_SIZE unset'})"
             for path, s in zip(files, scenarios) if s.world_size != world_size]
    if wrong:
        raise UsageError("\n  ".join(wrong) + "\n  run a scenario on its world_size ranks "
                         "(torchrun --nproc_per_node N -m zerocheck_ds ..., or `python3 -m "
                         "zerocheck_ds suite --world N`), or pass --any-world")


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        files = scenario_files(args.scenarios)
        scenarios = load_all(files)
        if os.path.exists(args.out) and not os.path.isdir(args.out):
            raise UsageError(f"--out {args.out}: exists and is not a directory")
        # torch (and possibly deepspeed) only once the input is known to be good.
        from ..world import world as world_module
        from ..engines.adapters import AdapterUnavailable
        from ..engines.make import make_adapter
        try:
            world = world_module.from_environment()
        except world_module.WorldError as e:
            raise UsageError(str(e)) from None
        if not args.any_world:
            check_world_sizes(files, scenarios, world.world_size)
        try:
            adapter = make_adapter(args.adapter)
        except AdapterUnavailable as e:
            raise UsageError(str(e)) from None
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_USAGE

    try:
        world_module.start(world, adapter.needs_process_group(world.world_size))
        from ..world.exchange import Exchange
        exchange = Exchange(world.rank, world.world_size)
    except Exception as e:
        print(f"{PROG}: error: cannot start torch.distributed: {type(e).__name__}: {e}",
              file=sys.stderr)
        return EXIT_USAGE
    from .heap import freeze_what_is_imported
    freeze_what_is_imported()
    try:
        return _run_all(args, scenarios, adapter, world, world_module, exchange)
    finally:
        world_module.stop(world)


def _run_all(args, scenarios, adapter, world, world_module, exchange):
    from ..replay.replay import Replay
    from ..findings.verdict import Finding, merge_ranks, summary_json, verdict_json, write_json

    lead = world.rank == 0
    version = adapter.version()
    if lead:
        os.makedirs(args.out, exist_ok=True)
        print(f"{PROG}: adapter {adapter.name} ({version}), {world.world_size} rank(s), "
              f"{len(scenarios)} scenario(s)")
    per_scenario = []
    for scenario in scenarios:
        # Every rank saves into the same folder (one machine, or a shared file system).
        folder = os.path.join(os.path.abspath(args.out), "checkpoints", scenario.name)
        if lead:
            shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder, exist_ok=True)
        result = _replay(Replay, scenario, adapter, world, exchange, args.stage, folder)
        gathered = world_module.gather(world, [vars(f) for f in result.findings])
        if lead:  # every rank is past its replay: the gather above waited for them
            shutil.rmtree(folder, ignore_errors=True)
        findings = merge_ranks(gathered) if world.world_size > 1 else [
            Finding(**dict(vars(f), ranks=[world.rank])) for f in result.findings]
        per_scenario.append((scenario.name, findings))
        if lead:
            write_json(os.path.join(args.out, f"{scenario.name}.verdict.json"),
                       verdict_json(scenario.name, adapter.name, version, findings, result.skipped,
                                    result.checks))
            _print_scenario(scenario, findings, result.skipped)
    total = sum(len(f) for _, f in per_scenario)
    if lead:
        try:  # every scenario's folder is gone: the parent too, unless something else is in it
            os.rmdir(os.path.join(os.path.abspath(args.out), "checkpoints"))
        except OSError:
            pass
        summary_path = os.path.join(args.out, "summary.json")
        write_json(summary_path, summary_json(adapter.name, version, per_scenario))
        print(f"{PROG}: {len(per_scenario)} scenario(s), {total} finding(s) -> {summary_path}")
    return EXIT_FINDING if total else EXIT_OK


def _replay(replay_class, scenario, adapter, world, exchange, stage, checkpoint_dir):
    """Returns the replay's result; a failure of the replay itself is a finding, not a crash."""
    from ..replay.state import ReplayResult
    from ..findings.verdict import Finding

    try:
        return replay_class(scenario, adapter, world.rank, world.world_size, exchange=exchange,
                            stage=stage, checkpoint_dir=checkpoint_dir).run()
    except Exception as e:
        return ReplayResult(findings=[Finding(
            invariant="op", op_index=None, op="replay", exception=traceback.format_exc(),
            message=f"the replay stopped: {type(e).__name__}: {e}")])


def _print_scenario(scenario, findings, skipped):
    status = "ok  " if not findings else "FAIL"
    extra = f", {len(skipped)} skipped" if skipped else ""
    print(f"  {status} {scenario.name} ({len(scenario.ops)} ops{extra})"
          + (f": {len(findings)} finding(s)" if findings else ""))
    for finding in findings[:5]:
        print(f"       {finding.one_line()}")
    if len(findings) > 5:
        print(f"       ... {len(findings) - 5} more in the verdict file")
