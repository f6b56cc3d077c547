"""A `load` with `world_size` M, resumed in a second world of M ranks (`--reshard`).

The saving world (replay.py) hands over, at the load, a copy of the checkpoint it loads, the state
it saved, assembled whole, and the dense twin's checkpoint of the same save (handover.py's `stage`:
rank 0 writes RESHARD/saved/TAG, RESHARD/saved/latest and RESHARD/snapshot.pt). The supervisor then
sends the scenario to a pool of M ranks with that folder (`Resume`): rank 0 converts the checkpoint
into the engine's world-size-free form (DeepSpeed: its `ds_to_universal` converter,
adapter.universal), and the M ranks replay the resumption through the replay itself: initialize the
saved target with a fresh optimizer and a config that loads that form, load it, then the scenario's
training operations after the load. I6: every parameter, fp32 master and optimizer state field,
assembled from the M ranks' partitions with plain torch.distributed, equals what the saving world
saved, bit for bit (re-partitioned for M, nothing lost or moved); I3, I4 and I9 as in any replay,
the twin resumed from its own checkpoint of that save.

What the second world cannot check is "not checked" under I6 with the reason (an engine without
a universal form, a stage other than 3, a load that keeps the optimizer's own state).
"""

import copy
import dataclasses
import os

import torch

from ..engines.adapters import UniversalUnsupported
from ..findings.verdict import Finding, Tally
from ..scenario import schema
from ..scenario.scenario import Op
from ..world.exchange import ExchangeError
from .handover import SNAPSHOT
from .replay import Replay
from .state import ReplayResult

# The operation name the second world's findings carry (their signatures say where they come
# from: "I6 load into another world: exp_avg: ...").
OP = "load into another world"
# The operations after the load that the second world replays too: training on.
TRAINING = schema.some("ops", "forward", "backward", "step", "zero_grad")


class Resume:
    """The second world's half of one load with `world_size`, on this rank.

    `request`: {"op_index", "world_size", "target", "folder"} as the saving world recorded it.
    run() returns a state.ReplayResult whose findings carry the saving scenario's operation
    indices: OP at the load's, "<op> after a load into another world" at the training
    operations after it."""

    def __init__(self, scenario, adapter, rank, world_size, exchange, request, stage_override=None,
                 disabled=(), audit=None):
        self.scenario = scenario
        self.adapter = adapter
        self.rank = rank
        self.world_size = world_size
        self._exchange = exchange
        self.request = request
        self.index = request["op_index"]
        self._stage = stage_override
        self._disabled = tuple(disabled)
        self._audit = audit
        self.tally = Tally()

    def run(self):
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
        return self._replay(config, tag, saved)

    def _replay(self, config, tag, saved):
        """The resumption as the user runs it, replayed (replay.py, every invariant): initialize
        the saved target with a fresh optimizer and the universal config, load, then the
        scenario's training operations after the load. The replay starts from what the saving
        world saved (I6's snapshot, the twin's own checkpoint); its findings and skips are
        renamed to the saving scenario's operations."""
        after = []
        for index, op in enumerate(self.scenario.ops[self.index + 1:], self.index + 1):
            if op.op not in TRAINING:
                break
            after.append((index, op))
        ops = [Op("initialize", optimizer="fresh", target=self.request["target"]),
               Op("load", tag=tag)] + [op for _, op in after]
        resumed = dataclasses.replace(self.scenario, world_size=self.world_size, ops=ops,
                                      config=config)
        result = Replay(resumed, self.adapter, self.rank, self.world_size,
                        exchange=self._exchange, stage=self._stage, disabled=self._disabled,
                        audit=self._audit, checkpoint_dir=os.path.join(self.request["folder"],
                                                                       "universal"),
                        universal={"tag": tag, "target": self.request["target"],
                                   "state": saved["state"], "twin": saved.get("twin")}).run()
        where = {0: (self.index, OP), 1: (self.index, OP)}
        where.update({i: (index, f"{op.op} after a load into another world")
                      for i, (index, op) in enumerate(after, 2)})
        for f in result.findings:
            derived = f"op {f.op_index} ({ops[f.op_index].op})" if f.op_index is not None else None
            f.op_index, f.op = where.get(f.op_index, (self.index, OP))
            if derived is not None:
                f.message = f.message.replace(derived, f"op {f.op_index} ({f.op})")
            f.message = f"in a world of {self.world_size} ranks: {f.message}"
        for entry in result.skipped:
            entry["op_index"], entry["op"] = where.get(entry["op_index"], (self.index, OP))
        return result

    def _finding(self, what, exception, message=None):
        return Finding(invariant="op", op_index=self.index, op=OP, expected="no exception",
                       actual=what, exception=exception,
                       message=message or f"{what} in a world of {self.world_size}: {exception}")

    def _finish(self, result, findings):
        result.findings = findings
        result.checks = self.tally.to_json()
        return result
