"""Replays one scenario on this rank through an adapter, checking the invariants after every op.

The replay is the user: it builds the model, writes the user's attributes, owns the user's
optimizer and runs the operations. I1 and I2 are checked after the build and after every
operation; I5 at every repeated initialize. Anything an adapter raises becomes a finding with
the exception text; the replay itself never stops early. An operation with nothing to act on
(a backward without a forward, a step with no engine, a set_attr on a missing path, save/load)
is recorded as skipped, as SCENARIO_FORMAT.md prescribes.

`Replay` holds the state and runs the loop; each operation is the function of its name in the
file of its family, taking the replay and the operation (as the C++ interpreter's, file for
file): lifecycle.py (initialize, release, destroy), training.py (forward, backward, step,
zero_grad, gather), attributes.py (set_attr, del_attr), checkpoints.py (save, load); checks.py
runs after every operation. `operation_functions` finds them from the schema's operation list.
"""

import copy

from ..engines import provenance
from ..findings.verdict import NEW_INVARIANTS, Tally
from ..model.tree import build_tree
from ..oracles import checkpoints as checkpoint_checks
from ..oracles import numerics, oracles
from ..oracles import inert_knobs
from ..oracles.ledger import AttributeLedger
from ..scenario import schema
from ..scenario.config import precision_column
from . import attributes, checkpoints, checks, lifecycle, training
from .injection import Injections
from .trace import Trace
from .state import ReplayResult, make_optimizer, trainable_parameters

# The files of the operation families; each lists its operations in OPERATIONS.
FAMILIES = (lifecycle, training, attributes, checkpoints)
# The operations that write the user's attributes.
_USER_WRITES = schema.some("ops", "set_attr", "del_attr")
# The switchable invariants numerics.py does not check: checkpoints.py's and the suite's second
# replay's.
_NOT_NUMERIC = schema.some("invariants", "I6", "I10")


def _numel(parameter):
    """A parameter's elements: whole as built, or (zero.Init partitioned it) DeepSpeed's count,
    when that is a count and not a user's attribute of the same name."""
    count = getattr(parameter, "ds_numel", None)
    return count if parameter.numel() == 0 and type(count) is int else parameter.numel()


def operation_functions(families=FAMILIES):
    """Returns {operation name: its function} over the families' OPERATIONS.

    Raises AssertionError naming an operation of the schema with no function, a function that is
    no operation of the schema, or an operation two families define.
    """
    functions = {}
    for family in families:
        for name in family.OPERATIONS:
            assert name not in functions, f"operation {name!r} is in two families"
            functions[name] = getattr(family, name)
    return schema.every("ops", functions)


OPERATIONS = operation_functions()


class Replay:
    """One scenario on this rank. `exchange` (exchange.Exchange, made once per process by every
    rank) turns on I3, I4, I6 and I9, less the invariants in `disabled`; `stage` replays the
    scenario with that ZeRO stage instead of its own. `audit` (provenance.Audit, installed once per
    process) names the upstream code that wrote a clobbered attribute; without it only the code
    that raised is named. `checkpoint_dir` (the same empty folder on every rank, the scenario's
    own) is where `save` writes; without it save and load are skipped. `trace` records I10's
    digests after every operation (trace.py); `knob_seed` draws the knobs that promise not to
    change the numbers again (oracles/inert_knobs.py) before the first operation.

    The state the operations share is public; `index` is the running operation's (None at the
    build and the teardown)."""

    def __init__(self, scenario, adapter, rank=0, world_size=1, observer=None, exchange=None,
                 stage=None, disabled=(), audit=None, checkpoint_dir=None, reshard=False,
                 universal=None, trace=False, knob_seed=None):
        self.scenario = scenario
        self.adapter = adapter
        self.audit = audit
        self.upstream = audit.files if audit is not None else provenance.UpstreamFiles(
            adapter.upstream_package())
        self.rank = rank
        self.world_size = world_size
        self.index = None
        # Told (op index or None, op name) before each step: the supervisor's heartbeat.
        self.observer = observer or (lambda index, op: None)
        self.node_kinds = {}  # module path -> the scenario's node kind, filled by run()
        self.result = ReplayResult()
        self.reported = set()  # identities of I1/I2 findings already reported
        self.live = []  # [LiveEngine], in initialize order
        self.accepted_repeats = []  # engines a correct adapter would have refused
        self.managed = oracles.ManagedObjects()
        self.loss = None
        self.loss_engine = None
        self.last_release = None  # the op index of the last release or destroy that ran
        self.last_failed_initialize = None  # the op index of the last first initialize that raised
        self.backward_since_step = False
        self.injections = Injections()  # the world's armed inject operations (injection.py)
        self.config = copy.deepcopy(scenario.config)
        if stage is not None:
            self.config["zero_optimization"]["stage"] = stage
        self.checkpoint_dir = checkpoint_dir
        self.reshard = reshard
        # The second world of a load into another world (reshard.py): {"tag", "target", "state",
        # "twin"}, what the saving world saved; its load reads the universal checkpoint.
        self.universal = universal
        if universal is not None:
            self.config = adapter.universal_config(self.config)
        self.saved = {}  # tag (None: the engine's default) -> the saved engine's target path
        self.latest_save = None  # the tag of the last save
        self.failed_saves = {}  # tag -> the `after` of what a failed save makes fail later
        self._make_checks(exchange, disabled)
        self.trace = Trace() if trace else None
        self.knob_seed = knob_seed
        if scenario.overflow_protection is not None:
            checks.skip(self, "", "overflow_protection",
                        "an option of the zerocheck engine only; DeepSpeed has no such key (only "
                        "the fp16 loss scaler skips steps there), so this replay ignores it")
        if world_size != scenario.world_size:
            checks.skip(self, "", "world size",
                        f"the scenario asks for {scenario.world_size} ranks, replayed on "
                        f"{world_size}; placement still uses {scenario.world_size}")
            if self.config.pop("train_batch_size", None) is not None:
                checks.skip(self, "", "config.train_batch_size",
                            "dropped: it was sized for the scenario's world size")

    def _make_checks(self, exchange, disabled):
        """With an exchange: the numeric checks (I3, I4, I9) and I6's, less those `disabled`."""
        scenario, self.tally = self.scenario, Tally()
        self.numerics = None
        if exchange is not None and set(NEW_INVARIANTS) - set(disabled) - set(_NOT_NUMERIC):
            self.numerics = numerics.NumericChecks(
                scenario, self.rank, self.world_size, exchange,
                lambda params: make_optimizer(scenario.optimizer, scenario.lr, params), disabled,
                self.tally, writers=self.audit, config=self.config,
                column=precision_column(self.adapter.version()))
        self.checkpoints = None
        if exchange is not None and "I6" not in disabled:
            self.checkpoints = checkpoint_checks.CheckpointChecks(self.rank, self.world_size,
                                                                  exchange, self.tally)

    # ---- the run ------------------------------------------------------------------------------

    def run(self):
        """Returns the findings and skipped operations of the whole scenario."""
        self.observer(None, "build")
        self._build()
        if self.knob_seed is not None:
            self._redraw_knobs()
        checks.check(self, "build")
        self._record("build")
        for index, op in enumerate(self.scenario.ops):
            self.index = index
            self.observer(index, op.op)
            OPERATIONS[op.op](self, op)
            checks.check(self, op.op)
            self._record(op.op)
        self.index = None
        if self.trace is not None:
            self.result.trace = self.trace.entries
        self.observer(None, "teardown")
        if self.live or self.accepted_repeats:
            lifecycle.release_all(self, "teardown")
        if self.numerics is not None or self.checkpoints is not None:
            self.result.checks = self.tally.to_json()
        self.result.written = self._written()
        return self.result

    def _build(self):
        """The user's model with the user's attributes, the placement's oracle and optimizer."""
        construction = (self.adapter.construction(self.config)
                        if self.scenario.construct == "zero_init" else None)
        built = build_tree(self.scenario, construction)
        for index, module in built.nodes.items():
            path, kind = built.module_paths[id(module)], self.scenario.tree[index].kind
            self.node_kinds[path] = kind
            if kind == "Expert":  # its Linear is part of the node, not a node of its own
                self.node_kinds[f"{path}.linear" if path else "linear"] = kind
        self.root = built.root
        if self.audit is not None:
            self.audit.watch(self.root)
        if self.numerics is not None:
            self.numerics.bind(self.root)
        self.ledger = AttributeLedger(built)
        for what, reason in self.ledger.apply_tree(self.scenario):
            checks.skip(self, "", what, reason)
        self.placement = oracles.PlacementOracle(self.scenario, self.ledger)
        self.injections.placed = self.placement.placed_paths
        for what, reason in self.placement.skipped:
            checks.skip(self, "", what, reason)
        self.user_optimizer = make_optimizer(self.scenario.optimizer, self.scenario.lr,
                                             trainable_parameters(self.root))
        if self.universal is not None:  # as if this world had made the saving world's save
            tag, target = self.universal["tag"], self.universal["target"]
            self.saved[tag], self.latest_save = target, tag
            if self.checkpoints is not None:
                self.checkpoints.adopt(tag, self.universal["state"])
            if self.numerics is not None:
                self.numerics.adopt(tag, target, self.universal["twin"])

    def _record(self, label):
        if self.trace is not None:
            self.trace.record(self, label)

    def _redraw_knobs(self):
        """I10's second replay: the knobs inert at this stage, world and version drawn again
        (every rank draws the same: one seed, the same model)."""
        zero = self.config["zero_optimization"]
        # The clipping DeepSpeed gets: the scenario's, else the 0.0 the adapter pins (none).
        clipping = self.config.get("gradient_clipping", 0.0)
        knobs = inert_knobs.inert(zero["stage"], self.world_size, self.adapter.version(), clipping)
        numels = [_numel(p) for p in self.root.parameters()]
        changed = inert_knobs.redraw(zero, knobs, numels, self.world_size, self.knob_seed)
        self.result.knobs = {name: list(pair) for name, pair in changed.items()}

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
