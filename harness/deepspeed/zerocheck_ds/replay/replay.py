"""Replays one scenario on this rank through an adapter, checking the invariants after every op.

The replay is the user: it builds the model, writes the user's attributes, owns the user's
optimizer and runs the operations. I1 and I2 are checked after the build and after every
operation; I5 at every repeated initialize. Anything an adapter raises becomes a finding with
the exception text; the replay itself never stops early. An operation with nothing to act on
(a backward without a forward, a step with no engine, a set_attr on a missing path, save/load)
is recorded as skipped, as SCENARIO_FORMAT.md prescribes.

Forward routing: through the engine that manages the root if there is one, else through the
user's model directly (engines on submodules still see their part of the call). Backward goes
through the engine the forward used (or the first live engine); step and zero_grad go to every
live engine.
"""

import copy
import re
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..engines import provenance
from ..findings.signatures import INVALID_CONFIG
from ..findings.verdict import NEW_INVARIANTS, Finding, Tally
from ..model import seeded
from ..model.tree import RouteCursor, build_tree, run_module
from ..oracles import checkpoints, numerics, oracles
from ..oracles.ledger import AttributeLedger, ObjectKey, WriteSkipped
from ..scenario import config_errors, schema
from . import handover

# The operations that write the user's attributes, and the invariants about them (whose findings
# name the writer).
_USER_WRITES = schema.some("ops", "set_attr", "del_attr")
_ATTRIBUTE_INVARIANTS = schema.some("invariants", "I1", "I2")
# A fingerprint change of an attribute (oracles.fingerprint's keys).
_CHANGED_ATTRIBUTE = re.compile(r"^(module|parameter) '([^']*)' attribute '([^']*)': ")


@dataclass(eq=False)
class LiveEngine:
    engine: object
    target: torch.nn.Module
    optimizer: object


@dataclass
class ReplayResult:
    findings: list = field(default_factory=list)  # [Finding]
    skipped: list = field(default_factory=list)  # [{"op_index", "op", "what", "reason"}]
    checks: dict = field(default_factory=dict)  # I3/I4/I9: {"checked": n, "not_checked": {...}}
    # Attribute names the scenario asked the user to write, and those really written (the rest
    # were refused as not representable: `forward`, `weight`, ...): {"modules": {...}, ...}.
    written: dict = field(default_factory=dict)
    # With --reshard, each load with a world_size this rank handed over (reshard.py):
    # [{"op_index", "world_size", "target", "folder"}], made by rank 0.
    reshard: list = field(default_factory=list)


# The optimizer class of each schema optimizer kind; SGD takes the schema's momentum (the C++
# replay's), Adam keeps torch's defaults.
OPTIMIZER_CLASSES = schema.every("optimizers", {"adam": "Adam", "sgd": "SGD"})


def optimizer_arguments(kind, lr):
    """Returns the keyword arguments of the optimizer of `kind` ({"lr": .., "momentum": ..})."""
    momentum = schema.OPTIMIZERS[kind]
    return {"lr": lr, "momentum": momentum} if momentum else {"lr": lr}


def make_optimizer(kind, lr, params):
    """Returns the user's optimizer over `params`, or None when there are none."""
    params = list(params)
    if not params:
        return None
    return getattr(torch.optim, OPTIMIZER_CLASSES[kind])(params, **optimizer_arguments(kind, lr))


def trainable_parameters(module):
    return [p for p in module.parameters() if p.requires_grad]


class Replay:
    """One scenario on this rank. `exchange` (exchange.Exchange, made once per process by every
    rank) turns on I3, I4, I6 and I9, less the invariants in `disabled`; `stage` replays the
    scenario with that ZeRO stage instead of its own. `audit` (provenance.Audit, installed once per
    process) names the upstream code that wrote a clobbered attribute; without it only the code
    that raised is named. `checkpoint_dir` (the same empty folder on every rank, the scenario's
    own) is where `save` writes; without it save and load are skipped."""

    def __init__(self, scenario, adapter, rank=0, world_size=1, observer=None, exchange=None,
                 stage=None, disabled=(), audit=None, checkpoint_dir=None, reshard=False,
                 universal=None):
        self.scenario = scenario
        self.adapter = adapter
        self._audit = audit
        self._upstream = audit.files if audit is not None else provenance.UpstreamFiles(
            adapter.upstream_package())
        self.rank = rank
        self.world_size = world_size
        # Told (op index or None, op name) before each step: the supervisor's heartbeat.
        self._observer = observer or (lambda index, op: None)
        self._node_kinds = {}  # module path -> the scenario's node kind, filled by run()
        self.result = ReplayResult()
        self._reported = set()  # identities of I1/I2 findings already reported
        self._live = []  # [LiveEngine], in initialize order
        self._accepted_repeats = []  # engines a correct adapter would have refused
        self._managed = oracles.ManagedObjects()
        self._loss = None
        self._loss_engine = None
        self._backward_since_step = False
        self._config = copy.deepcopy(scenario.config)
        if stage is not None:
            self._config["zero_optimization"]["stage"] = stage
        self._checkpoint_dir = checkpoint_dir
        self._reshard = reshard
        # The second world of a load into another world (reshard.py): {"tag", "target", "state",
        # "twin"}, what the saving world saved; its load reads the universal checkpoint.
        self._universal = universal
        if universal is not None:
            self._config = adapter.universal_config(self._config)
        self._saved = {}  # tag (None: the engine's default) -> the saved engine's target path
        self._latest_save = None  # the tag of the last save
        tally = Tally()
        self.numerics = None
        if exchange is not None and set(NEW_INVARIANTS) - set(disabled) - {"I6"}:
            self.numerics = numerics.NumericChecks(
                scenario, rank, world_size, exchange,
                lambda params: make_optimizer(scenario.optimizer, scenario.lr, params), disabled,
                tally)
        self.checkpoints = None
        if exchange is not None and "I6" not in disabled:
            self.checkpoints = checkpoints.CheckpointChecks(rank, world_size, exchange, tally)
        self._tally = tally
        if world_size != scenario.world_size:
            self._skip(None, "", "world size",
                       f"the scenario asks for {scenario.world_size} ranks, replayed on "
                       f"{world_size}; placement still uses {scenario.world_size}")
            if self._config.pop("train_batch_size", None) is not None:
                self._skip(None, "", "config.train_batch_size",
                           "dropped: it was sized for the scenario's world size")

    # ---- the run ------------------------------------------------------------------------------

    def run(self):
        """Returns the findings and skipped operations of the whole scenario."""
        self._observer(None, "build")
        construction = (self.adapter.construction(self._config)
                        if self.scenario.construct == "zero_init" else None)
        built = build_tree(self.scenario, construction)
        for index, module in built.nodes.items():
            path, kind = built.module_paths[id(module)], self.scenario.tree[index].kind
            self._node_kinds[path] = kind
            if kind == "Expert":  # its Linear is part of the node, not a node of its own
                self._node_kinds[f"{path}.linear" if path else "linear"] = kind
        self.root = built.root
        if self._audit is not None:
            self._audit.watch(self.root)
        if self.numerics is not None:
            self.numerics.bind(self.root)
        self.ledger = AttributeLedger(built)
        for what, reason in self.ledger.apply_tree(self.scenario):
            self._skip(None, "", what, reason)
        self.placement = oracles.PlacementOracle(self.scenario, self.ledger)
        for what, reason in self.placement.skipped:
            self._skip(None, "", what, reason)
        self.user_optimizer = make_optimizer(self.scenario.optimizer, self.scenario.lr,
                                             trainable_parameters(self.root))
        if self._universal is not None:  # as if this world had made the saving world's save
            tag, target = self._universal["tag"], self._universal["target"]
            self._saved[tag], self._latest_save = target, tag
            if self.checkpoints is not None:
                self.checkpoints.adopt(tag, self._universal["state"])
            if self.numerics is not None:
                self.numerics.adopt(tag, target, self._universal["twin"])
        self._check(None, "build")

        handlers = schema.every("ops", {
            "initialize": self._initialize, "forward": self._forward, "backward": self._backward,
            "step": self._step, "zero_grad": self._zero_grad, "set_attr": self._set_attr,
            "del_attr": self._del_attr, "release": self._release, "destroy": self._release,
            "save": self._save, "load": self._load, "gather": self._gather,
        })
        for index, op in enumerate(self.scenario.ops):
            self._observer(index, op.op)
            handlers[op.op](index, op)
            self._check(index, op.op)
        self._observer(None, "teardown")
        self._teardown()
        if self.numerics is not None or self.checkpoints is not None:
            self.result.checks = self._tally.to_json()
        self.result.written = self._written()
        return self.result

    def _written(self):
        """{"modules"/"parameters": {"asked": names, "written": names}} of this scenario."""
        asked = {"modules": set(), "parameters": set()}
        for node in self.scenario.tree:
            asked["modules"].update(e.name for e in node.attrs)
            for entries in node.param_attrs.values():
                asked["parameters"].update(e.name for e in entries)
        for op in self.scenario.ops:
            if op.op in _USER_WRITES:
                asked["parameters" if op.param else "modules"].add(op.name)
        written = {"modules": set(), "parameters": set()}
        for key, name, _ in self.ledger.expectations():
            written["parameters" if key.param else "modules"].add(name)
        return {kind: {"asked": sorted(asked[kind]), "written": sorted(written[kind])}
                for kind in asked}

    # ---- operations ---------------------------------------------------------------------------

    def _initialize_target(self, index, op):
        """The module an initialize wraps, or None after recording why it is skipped."""
        try:
            target = self.root.get_submodule(op.target)
        except Exception:
            return self._skip(index, op.op, f"target {op.target!r}", "no module at this path")
        if self.adapter.initialize_needs_parameters and not trainable_parameters(target):
            return self._skip(index, op.op, f"target {op.target!r}",
                              f"no trainable parameters: {self.adapter.name} needs some")
        return target

    def _initialize(self, index, op):
        if op.config_error is not None:
            return self._invalid_initialize(index, op)
        target = self._initialize_target(index, op)
        if target is None:
            return
        if op.optimizer == "same":
            optimizer = self.user_optimizer
        else:
            optimizer = make_optimizer(self.scenario.optimizer, self.scenario.lr,
                                       trainable_parameters(target))
            if optimizer is None:
                return self._skip(index, op.op, f"fresh optimizer for {op.target!r}",
                                  "the target has no trainable parameters")

        why_refused = self._managed.refusal_reason(target, optimizer)
        if why_refused is None:
            ok, engine = self._attempt(index, op.op,
                                       lambda: self.adapter.initialize(target, optimizer,
                                                                       self._config))
            if ok:
                self._live.append(LiveEngine(engine, target, optimizer))
                self._managed.add(target, optimizer)
                if self.numerics is not None:
                    self.numerics.initialized(op.target, op.optimizer, len(self._live),
                                              self.adapter.training(self._config, engine))
            elif self.numerics is not None:
                self.numerics.stop("an initialize raised")
            return

        optimizers = [self.user_optimizer, optimizer] + [e.optimizer for e in self._live]
        before = oracles.fingerprint(self.root, optimizers)
        exception = None
        try:
            engine = self.adapter.initialize(target, optimizer, self._config)
            self._accepted_repeats.append(engine)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # whatever it raised is judged by the oracle
            exception = e
        changes = oracles.fingerprint_changes(before, oracles.fingerprint(self.root, optimizers))
        findings = oracles.judge_repeated_initialize(self.adapter, index, why_refused, exception,
                                                     changes)
        for finding in findings:
            if finding.exception:
                self._raised_by(finding, exception)
            elif finding.expected == "nothing changed":
                self._changed_by(finding, changes)
        self._report(findings)
        if self.numerics is not None:
            self.numerics.repeated(accepted=exception is None,
                                   clean=exception is not None and not changes
                                   and self.adapter.is_refusal(exception))
        self._probe_training(index, refused=exception is not None)

    def _invalid_initialize(self, index, op):
        """I5: an initialize given an invalid config is refused as a configuration error, leaves
        the model and the optimizers as they were (attributes, hooks, storage, values,
        requires_grad), and training still runs (the probe; a later valid initialize is the
        scenario's own)."""
        target = self._initialize_target(index, op)
        if target is None:
            return
        optimizer = (self.user_optimizer if op.optimizer == "same" else
                     make_optimizer(self.scenario.optimizer, self.scenario.lr,
                                    trainable_parameters(target)))
        config = config_errors.invalid_config(self._config, op.config_error, self.world_size)
        optimizers = [self.user_optimizer, optimizer] + [e.optimizer for e in self._live]
        before = oracles.fingerprint(self.root, optimizers)
        values = {name: p.detach().clone() for name, p in self.root.named_parameters()}
        exception = None
        try:
            self._accepted_repeats.append(self.adapter.initialize(target, optimizer, config))
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # whatever it raised is judged below
            exception = e
        changes = oracles.fingerprint_changes(before, oracles.fingerprint(self.root, optimizers))
        changes += [f"parameter {name!r} values: changed"
                    for name, p in self.root.named_parameters()
                    if name in values and (p.shape != values[name].shape
                                           or not torch.equal(p.detach(), values[name]))]
        what = f"an initialize with an invalid config ({op.config_error})"
        findings = []
        if exception is None:
            findings.append(Finding(
                invariant="I5", op_index=index, op=op.op, attribute=INVALID_CONFIG,
                expected="refused", actual="accepted", message=f"{what} was accepted"))
        elif not self.adapter.is_config_error(exception):
            findings.append(Finding(
                invariant="I5", op_index=index, op=op.op, attribute=INVALID_CONFIG,
                expected="a configuration error", actual=type(exception).__name__,
                exception=f"{type(exception).__name__}: {exception}",
                message=f"{what} failed with {type(exception).__name__}: {exception}, not as a "
                        f"configuration error"))
        if changes:
            findings.append(Finding(
                invariant="I5", op_index=index, op=op.op, attribute=INVALID_CONFIG,
                expected="nothing changed", actual=changes[:20],
                message=f"{what} changed the model or optimizers: {'; '.join(changes[:5])}"))
            self._changed_by(findings[-1], changes)
        self._report(findings)
        if self.numerics is not None and (exception is None or changes):
            self.numerics.stop("an initialize with an invalid config was accepted or changed "
                               "the model")
        self._probe_training(index, refused=exception is not None)

    def _probe_training(self, index, refused):
        # A forward without gradients: proves the first engine still runs, changes no state.
        x = self._probe_input(index)
        try:
            with torch.no_grad():
                self._run_forward(x, RouteCursor([]))
        except KeyboardInterrupt:
            raise
        except BaseException as e:
            self._report([self._raised_by(oracles.training_still_runs_finding(index, refused, e),
                                          e)])

    def _forward(self, index, op):
        x, target = self._batch(index)
        cursor = RouteCursor(op.route)

        def forward_and_loss():
            out = self._run_forward(x, cursor)
            return F.mse_loss(out, target.to(out.device))

        self._loss = None
        ok, loss = self._attempt(index, op.op, forward_and_loss)
        root_engine = self._root_engine()
        if ok:
            self._loss = loss
            self._loss_engine = root_engine or (self._live[0] if self._live else None)
        if self.numerics is not None:
            self.numerics.forward(index, op.route, loss if ok else None,
                                  through_engine=root_engine is not None)

    def _run_forward(self, x, cursor):
        root_engine = self._root_engine()
        if root_engine is not None:
            return self.adapter.forward(root_engine.engine, x, cursor)
        # The user's own call: the input goes where the model is (an engine may have moved it).
        first = next(self.root.parameters(), None)
        if first is not None and first.device != x.device:
            x = x.to(first.device)
        return run_module(self.root, x, cursor)

    def _backward(self, index, op):
        if self._loss is None:
            return self._skip(index, op.op, "backward", "no forward since the last backward")
        loss, live = self._loss, self._loss_engine
        self._loss = None
        through_engine = live is not None and live in self._live
        if through_engine:
            ok, _ = self._attempt(index, op.op, lambda: self.adapter.backward(live.engine, loss))
        else:
            ok, _ = self._attempt(index, op.op, loss.backward)
        self._backward_since_step = self._backward_since_step or ok
        if self.numerics is not None:
            self.numerics.backward(index, ok, through_engine)

    def _step(self, index, op):
        if not self._live:
            return self._skip(index, op.op, "step", "no engine")
        if self.adapter.step_needs_backward and not self._backward_since_step:
            return self._skip(index, op.op, "step", f"no backward since the last step: "
                                                    f"{self.adapter.name}'s step needs one")
        self._backward_since_step = False
        ok = True
        for live in list(self._live):
            ok = self._attempt(index, op.op, lambda: self.adapter.step(live.engine))[0] and ok
        if self.numerics is not None:
            self.numerics.step(index, ok)

    def _zero_grad(self, index, op):
        if not self._live:
            return self._skip(index, op.op, "zero_grad", "no engine")
        ok = True
        for live in list(self._live):
            ok = self._attempt(index, op.op, lambda: self.adapter.zero_grad(live.engine))[0] and ok
        if self.numerics is not None:
            self.numerics.zero_grad(index, ok)

    def _set_attr(self, index, op):
        self._user_write(index, op,
                         lambda: self.ledger.write(op.module, op.param, op.name, op.value))

    def _del_attr(self, index, op):
        self._user_write(index, op, lambda: self.ledger.delete(op.module, op.param, op.name))

    def _user_write(self, index, op, write):
        what = f"{op.op} {op.name!r} on module {op.module!r}" + (
            f" parameter {op.param!r}" if op.param else "")
        try:
            write()
        except WriteSkipped as e:
            self._skip(index, op.op, what, str(e))
        except Exception as e:  # the engine made a plain user write fail
            self._report([self._raised_by(Finding(
                invariant="I1", op_index=index, op=op.op, module_path=op.module, param=op.param,
                attribute=op.name, exception=f"{type(e).__name__}: {e}",
                message=f"the user's {what} raised {type(e).__name__}: {e}"), e)])

    def _release(self, index, op):
        if not self._live and not self._accepted_repeats:
            return self._skip(index, op.op, op.op, "no engine")
        self._release_all(index, op.op)

    def _checkpointed_engine(self, index, op):
        """The one live engine a save or load acts on, or None after recording the skip."""
        if not self._live:
            self._skip(index, op.op, op.op, "no engine")
        elif self._checkpoint_dir is None:
            self._skip(index, op.op, op.op, "no checkpoint folder (the runner was given none)")
        elif len(self._live) > 1 or self._accepted_repeats:
            self._skip(index, op.op, op.op, "several live engines: the checkpoint's engine is "
                                            "ambiguous")
        else:
            return self._live[0]
        return None

    def _save(self, index, op):
        live = self._checkpointed_engine(index, op)
        if live is None:
            return
        tag = getattr(op, "tag", None)
        # Whether it raised or not, every rank goes on alike (the checks' collectives): a save
        # that failed is its own finding, and the load of it fails again, as a user's would.
        self._attempt(index, op.op,
                      lambda: self.adapter.save(live.engine, self._checkpoint_dir, tag))
        path = self._path_of(live.target)
        self._saved[tag] = path
        self._latest_save = tag
        if self.checkpoints is not None:
            self._report(self.checkpoints.saved(index, op.op, tag, live.engine, self.adapter))
            expected = (self.numerics.consolidation_expectation() if self.numerics is not None
                        else None)
            self._report(self.checkpoints.consolidated(index, op.op, tag, self._checkpoint_dir,
                                                       live.engine, self.adapter, expected))
        if self.numerics is not None:
            self.numerics.saved(tag, path)

    def _load(self, index, op):
        live = self._checkpointed_engine(index, op)
        if live is None:
            return
        tag = getattr(op, "tag", None)
        optimizer_states = getattr(op, "optimizer_states", True)
        module_only = getattr(op, "module_only", False)
        key = self._latest_save if tag is None else tag
        if key not in self._saved:
            return self._skip(index, op.op, op.op, "no save before it" if tag is None else
                              f"no save with the tag {tag!r} before it")
        if self._saved[key] != self._path_of(live.target):
            return self._skip(index, op.op, op.op, "no checkpoint of this engine's model")
        self._loss = None  # as with step: the pending graph would be stale
        if self.numerics is not None:
            self.numerics.forward_dropped()
        before = None
        if self.checkpoints is not None:  # what the options keep, and what a wrong value may be
            before, _ = self.checkpoints.before_load(live.engine, self.adapter)
        if self._universal is not None:
            ok, _ = self._attempt(index, op.op, lambda: self.adapter.load_universal(
                live.engine, self._checkpoint_dir, tag))
        else:
            ok, _ = self._attempt(index, op.op, lambda: self.adapter.load(
                live.engine, self._checkpoint_dir, tag, optimizer_states, module_only))
        if self.checkpoints is not None:
            snapshot = self.checkpoints.snapshot_of(tag)
            if snapshot is None:
                self._tally.skip("I6", "the state could not be read at the save")
                self.checkpoints.before_load(live.engine, self.adapter)  # the ranks' collectives
            else:
                expected = checkpoints.expected_after_load(snapshot, before, optimizer_states,
                                                           module_only)
                self._report(self.checkpoints.loaded(index, op.op, expected, live.engine,
                                                     self.adapter, before))
        if self.numerics is not None:
            if ok:
                self.numerics.loaded(tag, self._path_of(live.target), optimizer_states,
                                     module_only)
            else:
                self.numerics.stop("a load raised")
        if op.world_size:
            self._hand_over(index, op, key, optimizer_states and not module_only)

    def _hand_over(self, index, op, tag, restores_optimizer):
        """A load with `world_size`: with --reshard, rank 0 stages what the second world loads
        and must find (reshard.py); otherwise, or when it cannot, "not checked" with why."""
        snapshot = self.checkpoints.snapshot_of(tag) if self.checkpoints is not None else None
        if not self._reshard:
            reason = "resharding is checked on demand (--reshard), not in every scenario"
        elif not restores_optimizer:
            reason = "a load without the optimizer's state: a fresh optimizer has none to keep"
        elif snapshot is None:
            reason = ("I6 is switched off" if self.checkpoints is None
                      else "the state could not be read at the save")
        else:
            reason = None
            if self.rank == 0:
                resolved = handover.resolve_tag(self._checkpoint_dir, tag)
                try:
                    if resolved is None:
                        raise OSError("no 'latest' file names the checkpoint")
                    twin = self.numerics.twin_snapshot(tag) if self.numerics else None
                    folder = handover.stage(self._checkpoint_dir, index, resolved, snapshot, twin)
                    self.result.reshard.append({"op_index": index, "world_size": op.world_size,
                                                "target": self._saved[tag], "folder": folder})
                except OSError as e:
                    reason = f"the checkpoint could not be handed over: {e}"
        if reason is not None:
            self._skip(index, op.op, f"load into a world of {op.world_size}", reason)
            self._tally.skip("I6", f"a load into a world of {op.world_size}: {reason}")

    def _path_of(self, module):
        for path, candidate in self.root.named_modules():
            if candidate is module:
                return path
        return None

    def _gather(self, index, op):
        """The user's edit inside DeepSpeed's GatheredParameters (SCENARIO_FORMAT.md, "Gather"):
        the twin makes the same edit at the same point when a modifier rank publishes it; I3
        after the operation and after the next step says whether the engine kept it."""
        live = self._live[0] if self._live else None
        try:
            module = self.root.get_submodule(op.module)
        except Exception:
            return self._skip(index, op.op, f"module {op.module!r}", "no module at this path")
        if live is None:
            return self._skip(index, op.op, op.op, "no engine")
        if not any(m is module for m in live.target.modules()):
            return self._skip(index, op.op, f"module {op.module!r}",
                              "outside the live engine's target")
        self._loss = None  # its parameters change in place: the pending graph would be stale
        if self.numerics is not None:
            self.numerics.forward_dropped()
        ok, _ = self._attempt(index, op.op, lambda: self.adapter.gather(
            live.engine, module, op.modifier_rank, op.scale))
        if self.numerics is not None:
            if ok:
                self.numerics.gathered(op.module, op.modifier_rank, op.scale)
            else:
                self.numerics.stop("a gather raised")

    def _teardown(self):
        if self._live or self._accepted_repeats:
            self._release_all(None, "teardown")

    def _release_all(self, index, label):
        engines = [live.engine for live in self._live] + self._accepted_repeats
        for engine in engines:
            self._attempt(index, label, lambda: self.adapter.release(engine))
        self._live.clear()
        self._accepted_repeats.clear()
        self._managed.clear()
        self._loss_engine = None
        if self.numerics is not None:
            self.numerics.released()

    # ---- helpers ------------------------------------------------------------------------------

    def _root_engine(self):
        for live in self._live:
            if live.target is self.root:
                return live
        return None

    def _batch(self, index):
        """Returns (input, target) for op `index` on this rank: seeded.py's, as the C++ side's."""
        s = self.scenario
        return seeded.micro_batch(s.seed, index, self.rank, s.batch, s.features)

    def _probe_input(self, index):
        s = self.scenario
        return seeded.data(s.seed, "probe_input", index, self.rank, s.batch, s.features)

    def _attempt(self, index, op, action):
        """Runs `action`: returns (True, result), or (False, None) after reporting its error."""
        try:
            return True, action()
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # SystemExit from a library is a finding too, not our exit
            self._report([self._raised_by(Finding(
                invariant="op", op_index=index, op=op, expected="no exception",
                actual=type(e).__name__, exception=f"{type(e).__name__}: {e}",
                message=f"{op} raised {type(e).__name__}: {e}"), e)])
            return False, None

    def _raised_by(self, finding, exception):
        """Names the innermost upstream frame that raised `exception` in `finding`."""
        origin = self._upstream.raiser(exception)
        if origin is not None:
            finding.origin = origin.to_json()
            finding.message += f" (raised at {origin.describe()})"
        return finding

    def _changed_by(self, finding, changes):
        """Names the upstream code that wrote the first changed attribute the audit saw."""
        if self._audit is None:
            return
        for change in changes:
            match = _CHANGED_ATTRIBUTE.match(change)
            if not match:
                continue
            kind, path, name = match.groups()
            try:
                obj = (self.root.get_submodule(path) if kind == "module"
                       else self.root.get_parameter(path))
            except Exception:  # noqa: BLE001 - gone since: nobody to name
                continue
            origin = self._audit.last(obj, name)
            if origin is not None:
                finding.origin = origin.to_json()
                finding.message += f"; {kind} {path!r} attribute {name!r} by {origin.describe()}"
                return

    def _written_by(self, finding):
        """Names the upstream code that last wrote or deleted an I1/I2 finding's attribute."""
        if self._audit is None or not finding.attribute or finding.exception:
            return
        try:
            obj = self.ledger.lookup(ObjectKey(finding.module_path, finding.param or ""))
        except Exception:  # noqa: BLE001 - the object is gone: nobody to name
            return
        origin = self._audit.last(obj, finding.attribute)
        if origin is None:
            finding.message += ("; no upstream write of it was seen (an in-place change, or a "
                                "write around __setattr__)")
            return
        finding.origin = origin.to_json()
        verb = "deleted" if origin.action == "deleted" else "overwritten"
        finding.message += f"; {verb} by {origin.describe()}"

    def _check(self, index, op):
        findings = oracles.check_user_attributes(self.ledger, index, op)
        findings += self.placement.check(index, op)
        if self.numerics is not None:
            engines = self._live + [LiveEngine(e, None, None) for e in self._accepted_repeats]
            findings += self.numerics.check(index, op, engines, self.adapter)
        fresh = []
        for finding in findings:
            # A clobbered attribute stays clobbered; report it when it first appears (or changes).
            # A parameter that left the twin's trajectory stays off it: its first divergence (and
            # a partition rule's or a disagreement's first break) is the finding.
            key = (finding.invariant, finding.module_path, finding.param, finding.attribute)
            if finding.invariant not in NEW_INVARIANTS:
                key += (repr(finding.expected), repr(finding.actual))
            if key not in self._reported:
                self._reported.add(key)
                if finding.invariant in _ATTRIBUTE_INVARIANTS:
                    self._written_by(finding)
                fresh.append(finding)
        self._report(fresh)

    def _report(self, findings):
        for finding in findings:
            # The node kind makes a finding's signature; a parameter's is its module's.
            if finding.module_path is not None and finding.node_kind is None:
                finding.node_kind = self._node_kinds.get(finding.module_path)
        self.result.findings.extend(findings)

    def _skip(self, index, op, what, reason):
        self.result.skipped.append({"op_index": index, "op": op, "what": what, "reason": reason})
