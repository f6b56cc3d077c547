"""A `load` with `world_size` M, resumed in a second world of M ranks (`--reshard`).

The saving world (replay.py) hands over, at the load, a copy of the checkpoint it loads and the
state it saved, assembled whole (`stage`: rank 0 writes RESHARD/saved/TAG, RESHARD/latest and
RESHARD/snapshot.pt). The supervisor then sends the scenario to a pool of M ranks with that
folder (`Resume`): rank 0 converts the checkpoint into the engine's world-size-free form
(DeepSpeed: its `ds_to_universal` converter, adapter.universal), every rank builds the tree
afresh, initializes the same target with a fresh optimizer of the scenario's kind and a config
that loads that form, and loads it. I6: every parameter, fp32 master and optimizer state field,
assembled from the M ranks' partitions with plain torch.distributed, must equal what the saving
world saved (the snapshot), bit for bit: re-partitioned for M, nothing lost or moved.

What the second world cannot check is "not checked" under I6 with the reason (an engine without
a universal form, a stage other than 3, a load that keeps the optimizer's own state).
"""

import copy
import os
import shutil
import traceback

import torch

from . import checkpoints
from .adapters import UniversalUnsupported
from .exchange import ExchangeError
from .tree import build_tree
from .verdict import Finding, Tally

# The operation name the second world's findings carry (their signatures say where they come
# from: "I6 load into another world: exp_avg: ...").
OP = "load into another world"
SNAPSHOT = "snapshot.pt"


def folder_of(checkpoint_dir, op_index):
    """Where the saving world stages the checkpoint a load at `op_index` hands over."""
    return os.path.join(checkpoint_dir, f"reshard-{op_index}")


def resolve_tag(checkpoint_dir, tag):
    """The tag a load of `tag` reads (None: the one `latest` names), or None when there is none."""
    if tag is not None:
        return tag
    try:
        with open(os.path.join(checkpoint_dir, "latest"), encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


def stage(checkpoint_dir, op_index, tag, snapshot):
    """Rank 0 of the saving world, at the load: copies the checkpoint the load reads (later saves
    may overwrite it) and the saved state; returns the folder, or raises OSError."""
    folder = folder_of(checkpoint_dir, op_index)
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(os.path.join(checkpoint_dir, tag), os.path.join(folder, "saved", tag))
    with open(os.path.join(folder, "saved", "latest"), "w", encoding="utf-8") as f:
        f.write(tag)
    torch.save({"tag": tag, "state": snapshot}, os.path.join(folder, SNAPSHOT))
    return folder


class Resume:
    """The second world's half of one load with `world_size`, on this rank.

    `request`: {"op_index", "world_size", "target", "folder"} as the saving world recorded it.
    run() returns a replay.ReplayResult whose findings carry op OP at the load's index."""

    def __init__(self, scenario, adapter, rank, world_size, exchange, request, stage_override=None):
        self.scenario = scenario
        self.adapter = adapter
        self.rank = rank
        self.world_size = world_size
        self._exchange = exchange
        self.request = request
        self.index = request["op_index"]
        self._stage = stage_override
        self.tally = Tally()
        self.checks = checkpoints.CheckpointChecks(rank, world_size, exchange, self.tally)

    def run(self):
        from .replay import ReplayResult, make_optimizer, trainable_parameters

        result = ReplayResult()
        folder = self.request["folder"]
        saved = torch.load(os.path.join(folder, SNAPSHOT))
        tag = saved["tag"]
        config = copy.deepcopy(self.scenario.config)
        if self._stage is not None:
            config["zero_optimization"]["stage"] = self._stage
        config.pop("train_batch_size", None)  # sized for the saving world
        # Rank 0 converts; every rank learns whether it could (one object exchange).
        reason = failure = None
        if config["zero_optimization"]["stage"] != 3:
            # Stages 1 and 2 keep flat partitions padded for the world size: no field of the
            # saving world's assembly has a counterpart of the same size in another world.
            reason = (f"stage {config['zero_optimization']['stage']}: the flat partitions are "
                      f"laid out per world size; resharding is compared at stage 3")
        elif self.rank == 0:
            try:
                self.adapter.universal(os.path.join(folder, "saved"), tag,
                                       os.path.join(folder, "universal"))
            except UniversalUnsupported as e:
                reason = str(e)
            except Exception as e:  # noqa: BLE001 - a checkpoint the converter refuses: finding
                failure = f"{type(e).__name__}: {e}"
        try:
            verdict = self._exchange.objects({"reason": reason, "failure": failure})[0]
        except ExchangeError as e:
            return self._finish(result, [self._finding("exchange", str(e))])
        if verdict["reason"]:
            self.tally.skip("I6", f"a load into a world of {self.world_size}: {verdict['reason']}")
            result.skipped.append({"op_index": self.index, "op": OP,
                                   "what": f"world of {self.world_size}",
                                   "reason": verdict["reason"]})
            return self._finish(result, [])
        if verdict["failure"]:
            return self._finish(result, [self._finding(
                "the conversion", verdict["failure"],
                message=f"converting the checkpoint {tag!r} for a world of {self.world_size} "
                        f"failed: {verdict['failure']}")])
        built = build_tree(self.scenario)
        target = built.root.get_submodule(self.request["target"])
        optimizer = make_optimizer(self.scenario.optimizer, self.scenario.lr,
                                   trainable_parameters(target))
        findings = []
        engine = None
        try:
            engine = self.adapter.initialize(target, optimizer,
                                             self.adapter.universal_config(config))
            self.adapter.load_universal(engine, os.path.join(folder, "universal"), tag)
        except Exception as e:  # noqa: BLE001 - every rank still reads (the checks' collectives)
            findings.append(self._finding(
                "initialize" if engine is None else "load", f"{type(e).__name__}: {e}",
                message=f"{'initialize' if engine is None else 'load_checkpoint'} in a world of "
                        f"{self.world_size} raised {type(e).__name__}: {e}",
                trace=traceback.format_exc()))
        if engine is None:  # nothing to compare; every rank still makes the reading's collectives
            self.checks.before_load(None, self.adapter)
            self.tally.skip("I6", f"a load into a world of {self.world_size}: initialize raised")
        else:
            findings += self.checks.loaded(self.index, OP, saved["state"], engine, self.adapter)
        for f in findings:
            if f.invariant == "I6":
                f.message = f"in a world of {self.world_size} ranks: {f.message}"
        if engine is not None:
            self.tally.skip("I3", f"training on after a load into a world of {self.world_size}: "
                                  f"the dense twin does not follow into the second world")
            try:
                self.adapter.release(engine)
            except Exception:  # noqa: BLE001 - the world is left anyway
                pass
        return self._finish(result, findings)

    def _finding(self, what, exception, message=None, trace=None):
        return Finding(invariant="op", op_index=self.index, op=OP, expected="no exception",
                       actual=what, exception=trace or exception,
                       message=message or f"{what} in a world of {self.world_size}: {exception}")

    def _finish(self, result, findings):
        result.findings = findings
        result.checks = self.tally.to_json()
        return result
