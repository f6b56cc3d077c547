"""I3, I4 and I9 on an upstream engine: its numbers, its partitions, and the ranks' agreement.

I3  after every forward, this rank's loss equals the dense twin's loss for its micro-batch; after
    every operation while an engine trains the model, every parameter, assembled from the ranks'
    shards (stage 3) or flat partitions (stages 1, 2) with plain torch.distributed, and every
    copy a rank holds whole, equals the twin's (twin.py, under the engine's training rules).
    With 16-bit parameters, after every optimizer step at world 2 at most, also each rank's fp32
    master (read inside the step, inside.py): the bf16 value rounds a master's low digits away,
    so a wrong accumulation or reduce can leave every value right for steps while the state the
    optimizer carries forward has already parted (an "fp32 master" finding).
I4  the partitions hold what the partition model (partition_model.py) says, after the operations
    where DeepSpeed promises it: every shard ceil(n/W) elements, a released parameter holds no
    data, everything partitioned after initialize, after a boundary step the persistent
    parameters whole and the others released; stages 1 and 2: each rank's flat partition and its
    optimizer state sized flat / W.
I9  after every operation all ranks agree on what they hold: the live engines, the parameter list
    with shapes, partition sizes and statuses, the step counters, and every copy held whole.

Tolerance: world 2: none (equal as numbers, a NaN matching a NaN): dividing by 2 is exact, so
DeepSpeed's sum of g_r / 2 and the twin's give the same bits. At world >= 3 Gloo sums the ranks'
gradients in an order of its own. Until the first optimizer step nothing reduced has been used,
so losses and parameters are compared exactly. After the first step the parameters are compared
within a bound derived for that one step (`_first_step_bound`; not with gradient clipping in
effect, whose coefficient comes from a norm summed in another order too); from the second step
on the two trajectories' rounding compounds through the optimizer and the model, which no bound
here follows: "not checked", with that reason.

The twin cannot follow every scenario: a submodule target (the user's forward trains the rest
too), several live engines or an accepted repeated initialize, an operation that raised, a
backward before any engine, the user's optimizer handed to a second engine, a world size other
than the scenario's, gradient clipping at ZeRO stage 1 or 2. From then on I3 says "not checked"
with the reason; the tallies go into the verdict and summary.json. A check never raises: every rank makes the same collectives whatever
its own checks do, and a check that fails is reported as such (an `op` finding naming the check),
never as a finding about the engine.
"""

import hashlib
import inspect
import math
import traceback

import torch

from ..findings.verdict import NEW_INVARIANTS, Finding, Tally
from ..model import partition_model, seeded, twin
from ..model.twin import replaced_first
from ..model.tree import RouteCursor, build_tree, not_whole, run_module
from ..scenario import schema
from ..world.exchange import ExchangeError
from . import inside
from .overflow import OverflowChecks
from .engine_state import StateUnavailable

_AFTER_FIRST_STEP = ("world >= 3 after the first optimizer step: Gloo's sum order compounds "
                     "through the trajectory")
# The invariants that read an engine's state (I9 compares what every rank says, state or not).
_READ_STATE = schema.some("invariants", "I3", "I4")
# What a finding of I4 or I9 on a field is keyed by besides the field: the upstream code that last
# wrote it, as the audit saw it (provenance.py). A parameter's field is made by a write of one of
# its attributes (a whole copy and the elements held are its data), the step counters by writes on
# the engine.
_PARAM_FIELD_ATTRIBUTES = {"whole_copy": "data", "held": "data", "status": "ds_status",
                           "shard": "ds_tensor", "shape": "ds_shape"}
_ENGINE_COUNTERS = ("global_steps", "micro_steps")


def _ordered_bits(t):
    """float32 -> int64 whose order is the floats' (for ulp distances)."""
    i = t.contiguous().view(torch.int32).to(torch.int64)
    return torch.where(i < 0, -(i & 0x7FFFFFFF), i)


def difference(expected, actual, tolerance=None):
    """Returns None when equal as numbers (NaN matching NaN), or within `tolerance` (a tensor of
    per-element bounds) when given; else a dict describing the gap."""
    e, a = expected.detach().reshape(-1).float(), actual.detach().reshape(-1).float()
    if e.numel() != a.numel():
        return {"elements": f"{a.numel()} (expected {e.numel()})"}
    same = (e == a) | (torch.isnan(e) & torch.isnan(a))
    if tolerance is not None:
        same |= (e.double() - a.double()).abs() <= tolerance.reshape(-1).double()
    if bool(same.all()):
        return None
    differ = (~same).nonzero().reshape(-1)
    first = int(differ[0])
    gap = (e - a).abs()
    finite = torch.isfinite(gap) & ~same
    max_abs = float(gap[finite].max()) if bool(finite.any()) else float("inf")
    scale = e.abs().clamp_min(torch.finfo(torch.float32).tiny)
    max_rel = float((gap / scale)[finite].max()) if bool(finite.any()) else float("inf")
    ulps = (_ordered_bits(e) - _ordered_bits(a)).abs()
    out = {"differing": int(differ.numel()), "of": int(e.numel()), "first_index": first,
           "expected": float(e[first]), "actual": float(a[first]), "max_abs": max_abs,
           "max_rel": max_rel, "max_ulp": int(ulps[~same].max())}
    if tolerance is not None:
        out["bound_at_first"] = float(tolerance.reshape(-1)[first])
    return out


def describe_gap(gap, reference="twin"):
    if "elements" in gap:
        return f"holds {gap['elements']} elements"
    bound = (f" (allowed {gap['bound_at_first']:.3g}: another sum order at world >= 3)"
             if "bound_at_first" in gap else "")
    return (f"{gap['differing']} of {gap['of']} elements differ; first at [{gap['first_index']}]: "
            f"{gap['actual']!r}, {reference} {gap['expected']!r}{bound}; max abs {gap['max_abs']:.3g}, "
            f"max rel {gap['max_rel']:.3g}, max {gap['max_ulp']} ulp")


def _digest(tensor):
    t = tensor.detach().reshape(-1).contiguous().float().cpu()
    return hashlib.blake2b(t.numpy().tobytes(), digest_size=8).hexdigest()


# What each rank exchanges that is its own view, never a disagreement (I9): where the engine parts
# from the twin and which of its own fp32 masters differ (I3's, each rank holds its partition's),
# who wrote a field (says where a disagreement comes from), I11's non-finite values (its own
# partition's). Master, export seed 50: a one-element expert whose master only rank 0 holds was
# "ranks disagree on masters" before `masters` was listed here.
RANKS_OWN_VIEWS = ("inside", "masters", "writers", "overflow")


class NumericChecks:
    """The I3, I4 and I9 oracles of one replay on one rank, and I11's (overflow.py), whose every
    rank's view rides on the same object exchange."""

    def __init__(self, scenario, rank, world_size, exchange, make_optimizer, disabled=(),
                 tally=None, writers=None, config=None, column="master"):
        self.scenario = scenario
        # Who last wrote a field I4 and I9 judge (provenance.Audit: last(obj, name) -> an Origin
        # or None, watch_also(obj)); None: the keys name the rule or field alone.
        self._writers = writers
        self.rank = rank
        self.world_size = world_size
        self._exchange = exchange
        self._make_optimizer = make_optimizer
        self.enabled = set(NEW_INVARIANTS) - set(disabled)
        self.tally = tally if tally is not None else Tally()
        # I11 (overflow.py): the promise of the version `column` for the replay's `config` (its
        # stage may be the suite's --stage); it rides on this class's object exchange.
        self._overflow = None
        if "I11" in self.enabled:
            self._overflow = OverflowChecks(config or scenario.config, column, self.tally)
        self._reference = None  # a pristine build of the model: shapes and the twin's copy
        self._twin = None
        self._training = None
        self._stopped = None  # why the twin stopped following (None: following)
        if world_size != scenario.world_size:
            self._stopped = (f"replayed on {world_size} ranks, the scenario has "
                             f"{scenario.world_size}")
        # The replay's config: the suite's --stage may have changed the scenario's stage.
        unfollowed = twin.precision_not_followed(config or scenario.config, scenario.world_size)
        if self._stopped is None and unfollowed:
            self._stopped = (f"the twin does not follow this precision; in effect: "
                             f"{', '.join(unfollowed)}")
        self._engine_started = False  # an engine was created (the first one: I4 after initialize)
        self._parted = False  # I3 saw the engine part from the twin (its numbers no oracle's now)
        self._user_optimizer_wrapped = False
        self._micro_steps = 0
        self._boundaries = 0  # optimizer steps so far, every engine's
        self._boundaries_before_engine = 0  # of them, before the engine the twin follows now
        self._event = None  # what the last operation was, for I4: "initialized", "boundary"
        self._pending_loss = None
        self._after_gathered_edit = False  # a gather published an edit the twin made too
        self._twin_snapshots = {}  # tag -> (target path, the twin's snapshot or None)
        self._twin_latest = None
        self._resumed = False  # the engine resumes another world's run (adopt)
        # I3's root cause (inside.py): what the twin computed in the last backward or step, for
        # comparing with what the engine computed inside it; the scenario's first place where
        # they part (the `origin` of its later I3 findings); the parameters that got a gradient
        # since the last optimizer step, and in the last one.
        self._twin_inside = None
        self._located = None
        self._reached = set()
        self._with_gradient = None

    # ---- events from the replay -------------------------------------------------------------

    def stop(self, reason):
        """The twin can no longer follow the engine (the first reason is kept)."""
        if self._stopped is None:
            self._stopped = reason

    def _twin_does(self, action):
        """Runs a step of the twin; one that raises (a scenario it cannot run) stops it."""
        try:
            return action()
        except Exception as e:  # noqa: BLE001 - never a finding: the twin is the harness's
            self.stop(f"the dense twin raised {type(e).__name__}")
            return None

    def initialized(self, target_path, optimizer_kind, live_count, training):
        """A non-repeated initialize created an engine over `target_path`."""
        first = not self._engine_started
        self._engine_started = True
        if self._overflow is not None:
            self._overflow.initialized(n for n, p in self._reference_model().named_parameters()
                                       if p.requires_grad)
        self._micro_steps = 0
        self._reached = set()  # a new engine's first step starts from no gradient
        self._event = "initialized" if first else "reinitialized"
        if optimizer_kind == "same":
            if self._user_optimizer_wrapped:
                self.stop("the user's optimizer was handed to a second engine (the first one "
                          "replaced its parameter groups)")
            self._user_optimizer_wrapped = True
        if target_path != "":
            self.stop("an engine over a submodule: the user's forward trains the rest too")
        if live_count > 1:
            self.stop("several live engines")
        if training is None:
            self.stop("the engine's training rules are unknown")
        elif training.gradient_clipping > 0 and not training.clip_followed:
            self.stop("gradient_clipping at ZeRO stage 1 or 2: DeepSpeed reduces the clip's norm "
                      "in fp32 over flat partitions (runtime/zero/stage_1_and_2.py:1698-1706 "
                      "(v0.14.5)), which the twin does not follow")
        if self._stopped is not None:
            return
        self._training = training
        self._boundaries_before_engine = self._boundaries
        if self._twin is None:
            self._twin = twin.DenseTwin(
                self._reference_model(), self.world_size, training,
                self.scenario.config["gradient_accumulation_steps"], self._make_optimizer,
                run_module)
        self._twin_does(lambda: self._twin.start(target_path))

    def repeated(self, accepted, clean):
        """A repeated initialize: refused cleanly, or not (accepted, failed, changed things)."""
        if accepted:
            self.stop("a repeated initialize was accepted: two engines over one model")
        elif not clean:
            self.stop("a repeated initialize failed or changed the model")

    def forward(self, index, route, loss, through_engine, inputs=None):
        """A training forward on this rank; `loss` is its loss tensor (None when it raised).
        `inputs` {rank: value}: the injections this forward consumed (element 0 of that rank's
        input batch is the value, replay/injection.py)."""
        self._pending_loss = None
        if self._overflow is not None:
            self._overflow.forward(inputs)
        if loss is None:
            return self.stop("a forward raised")
        if not through_engine or not self._following():
            if self._twin is not None:
                self._twin.drop_pending()
            return None
        batches = [seeded.micro_batch(self.scenario.seed, index, r, self.scenario.batch,
                                      self.scenario.features) for r in range(self.world_size)]
        for rank, value in (inputs or {}).items():
            if rank < len(batches):
                batches[rank] = (replaced_first(batches[rank][0], value), batches[rank][1])
        losses = self._twin_does(lambda: self._twin.forward(batches, lambda: RouteCursor(route)))
        if losses is not None:
            self._pending_loss = (float(loss.detach().float().item()), losses[self.rank])
        return None

    def backward(self, index, ok, through_engine, losses=None, gradients=None):
        """A backward on this rank; `losses` {rank: factor} and `gradients` {rank: (name, value)}
        are the injections it consumed (the twin applies every rank's)."""
        nonfinite = None  # the twin's say: did any rank's gradient hold a NaN or inf
        try:
            return self._backward(ok, through_engine, losses, gradients)
        finally:
            if self._overflow is not None:
                if self._following() and self._twin_inside and self._twin_inside[0] == "backward":
                    nonfinite = any(g is not None and not bool(torch.isfinite(g.float()).all())
                                    for grads in self._twin_inside[1].values() for g in grads)
                self._overflow.backward(ok and through_engine, losses, gradients, nonfinite)

    def _backward(self, ok, through_engine, losses, gradients):
        if not ok:
            return self.stop("a backward raised")
        if not through_engine:
            if not self._engine_started:
                self.stop("a backward before any engine: the user's own autograd left .grad")
            return None
        if self._following():
            reached = self._twin_does(lambda: self._twin.backward(losses, gradients))
            if reached is not None and self._following():
                self._reached |= reached
                self._twin_inside = ("backward", dict(self._twin.last_gradients),
                                     self._twin.accumulated())
        return None

    def step(self, index, ok):
        if not ok:
            return self.stop("a step raised")
        self._micro_steps += 1
        boundary = self._micro_steps % self.scenario.config["gradient_accumulation_steps"] == 0
        self._event = "boundary" if boundary else None
        self._boundaries += boundary
        norm = None  # the twin's 2-norm of the gradients its optimizer stepped with (I11)
        if self._following():
            before = self._twin.masters()  # the fp32 masters the optimizer steps
            if self._twin_does(self._twin.step):
                used = {name: grad for name, (grad, _) in self._twin.last_step[0].items()}
                after = self._twin.masters()
                self._twin_inside = ("step", used, dict(self._twin.last_clipped), before, after)
                norm = math.sqrt(sum(float(g.double().norm(2)) ** 2 for g in used.values()))
        if self._overflow is not None:
            self._overflow.step(norm if self._following() and not self._parted else None)
        if boundary:
            self._with_gradient, self._reached = self._reached, set()
        return None

    def zero_grad(self, index, ok):
        if not ok:
            return self.stop("a zero_grad raised")
        if self._following():
            self._twin_does(self._twin.zero_grad)
        return None

    def forward_dropped(self):
        """The pending forward was dropped (a load consumes it)."""
        self._pending_loss = None
        if self._twin is not None:
            self._twin.drop_pending()

    def released(self):
        """Every engine let go of the model: I4 then checks it was given back whole."""
        self._event = "released"
        if self._twin is not None:
            self._twin.drop_pending()

    def saved(self, tag, target_path):
        """A save of the engine over `target_path` succeeded on every rank: the twin keeps its
        own checkpoint under the same tag (None: the engine's default)."""
        self._twin_snapshots[tag] = (target_path, self._twin.snapshot() if self._following()
                                     else None)
        self._twin_latest = tag

    def twin_snapshot(self, tag):
        """The twin's checkpoint of the save `tag` (None: the latest), or None."""
        return self._twin_snapshots.get(self._twin_latest if tag is None else tag, (None, None))[1]

    def adopt(self, tag, target_path, snapshot):
        """Another world's save `tag` of the engine over `target_path`, with its twin's checkpoint
        (None: that twin did not follow): a later load resumes a run that stepped before."""
        self._twin_snapshots[tag] = (target_path, snapshot)
        self._twin_latest = tag
        self._resumed = True

    def gathered(self, module_path, modifier_rank, scale):
        """A gather over the module at `module_path` (of the user's model): with a modifier rank
        the twin multiplies that module's parameters by `scale`, as the user did on that rank;
        without one the edit was each rank's own and is not kept."""
        if not self._following() or modifier_rank is None:
            return
        # I3's later findings say so: a value that differs after a published edit is the edit's
        # fate (its own signature), not the training rules'.
        self._after_gathered_edit = True
        target = self._twin.target
        # The copy the modifier rank edited must be the twin's value before the edit.
        before = {name: value.clone() for name, value in self._twin.values().items()}
        def edit():
            with torch.no_grad():
                for p in self._reference_model().get_submodule(module_path).parameters():
                    if any(p is q for q in target.parameters()):
                        p.mul_(scale)
        self._twin_does(edit)
        self._twin_does(self._twin.edited)
        self._twin_inside = ("gather", before,
                             {name: value.clone() for name, value in self._twin.values().items()})

    @property
    def after_gathered_edit(self):
        """Whether a gather published an edit the twin made too (I6 keys a consolidation's value
        that differs by it)."""
        return self._after_gathered_edit

    def consolidation_expectation(self, masters=False):
        """{state dict key: the twin's value} of the followed target (a tied parameter under each
        of its keys; `masters`: each parameter's fp32 master instead, what a consolidation of
        the fp32 masters holds), or None when the twin does not follow."""
        if not self._following():
            return None
        names = {id(p): name for name, p in self._twin.target.named_parameters()}
        fp32 = self._twin.masters() if masters else {}
        return {key: fp32[names[id(t)]] if id(t) in names and names[id(t)] in fp32
                else t.detach().clone()
                for key, t in self._twin.target.state_dict(keep_vars=True).items()}

    def loaded(self, tag, target_path, optimizer_states, module_only):
        """A load succeeded: the twin resumes from its checkpoint of the same tag."""
        if self._overflow is not None:
            self._overflow.loaded()
        path, snapshot = self._twin_snapshots.get(self._twin_latest if tag is None else tag,
                                                  (None, None))
        if not self._following():
            return
        if snapshot is None or path != target_path:
            return self.stop("a load of a checkpoint saved while the twin did not follow")
        self._twin_does(lambda: self._twin.restore(
            snapshot, optimizer_states=optimizer_states and not module_only))
        if self._following():  # what each restored field must hold: the twin's after its load
            restored = self._twin.snapshot()
            self._twin_inside = ("load", restored["values"], restored["optimizer"])

    # ---- after every operation ----------------------------------------------------------------

    def check(self, index, op, live, adapter):
        """Returns the findings of I3, I4 and I9 after operation `index` (all ranks call this).

        `live`: the engines alive now (the replay's LiveEngine list, accepted repeats included).
        """
        event, self._event = self._event, None
        pending_loss, self._pending_loss = self._pending_loss, None
        twin_inside, self._twin_inside = self._twin_inside, None
        observed = self._observed_inside(live, adapter)
        objects = self._objects(live)
        findings = []
        if pending_loss is not None and "I3" in self.enabled:
            findings += self._loss_check(index, op, *pending_loss)
            self._parted = self._parted or bool(findings)
        state, unavailable = None, None
        if len(live) == 1:
            try:
                state = adapter.observe(live[0].engine)
            except StateUnavailable as e:
                unavailable = str(e)
            except Exception as e:  # noqa: BLE001 - reading the state failed: say so, once
                unavailable = f"reading the engine's state raised {type(e).__name__}: {e}"
        elif len(live) > 1:
            unavailable = "several live engines"
        expected, plan, summary = [], None, None
        try:
            expected = self._expected_params(live[0].target if len(live) == 1 else None)
            plan = self._plan(state, expected) if state is not None else None
            summary = self._summary(state) if state else None
        except Exception:  # noqa: BLE001 - this rank still takes part in the exchange
            findings.append(self._check_failed(index, op, "state summary"))
            state, plan, unavailable = None, None, "the checks could not read it"
        mine = {"engines": len(live), "state": summary, "unavailable": unavailable,
                "plan": plan[0] if plan else None,
                "inside": self._locate(twin_inside, observed, expected),
                "masters": self._masters_that_differ(twin_inside, observed, expected),
                "writers": self._field_writers(objects, live),
                "overflow": (self._overflow.observation(live, adapter)
                             if self._overflow is not None else None)}
        try:
            everyone = self._exchange.objects(mine)
        except ExchangeError as e:
            return findings + [self._exchange_failed(index, op, e)]
        self._first_located(index, op, [s.get("inside") for s in everyone])
        if self._overflow is not None:
            findings += self._safely(index, op, "I11", lambda: self._overflow.judge(
                index, op, [s.get("overflow") for s in everyone]))
        if "I9" in self.enabled:
            self.tally.done("I9")
            findings += self._safely(index, op, "I9", lambda: self._agreement(index, op, everyone))
        if event == "released" and "I4" in self.enabled:
            findings += self._safely(index, op, "I4", lambda: self._given_back(index, op))
        if not live:
            return findings
        if state is None:
            for inv in _READ_STATE:
                if inv in self.enabled:
                    self.tally.skip(inv, unavailable or "no engine state")
            return findings
        if "I4" in self.enabled:
            findings += self._safely(index, op, "I4",
                                     lambda: self._partitions(index, op, state, expected, event,
                                                              objects))
        sizes = {s["plan"] for s in everyone}
        if len(sizes) != 1 or None in sizes:  # decided from what every rank sees alike
            if "I3" in self.enabled:
                self.tally.skip("I3", "the ranks' shard sizes disagree (I9)")
            return findings
        try:
            gathered = self._exchange.flat(plan[1])
        except ExchangeError as e:
            return findings + [self._exchange_failed(index, op, e)]
        if "I3" in self.enabled:
            masters = sorted({name for s in everyone for name in s.get("masters") or ()})
            parity = self._safely(index, op, "I3", lambda: self._parity(
                index, op, state, self._assemble(state, expected, gathered),
                stepped=event == "boundary", objects=objects, masters=masters))
            findings += parity
            self._parted = self._parted or bool(parity)
            if (not parity and self._located is not None and self._located["op_index"] == index
                    and self._located["function"] == inside.GATHER_FUNCTION):
                # A gather's copy that differed but left the values right (its late data landed
                # before the edit) parted from nothing: later findings are not its.
                self._located = None
        return findings

    # ---- who wrote a field (I3's whole copy, I4, I9) ---------------------------------------------

    @staticmethod
    def _objects(live):
        """{name: parameter} of the one live engine's module (the names the engine state uses);
        {} when there is no such module (a test adapter's engine over nothing)."""
        target = live[0].target if len(live) == 1 else None
        return dict(target.named_parameters()) if isinstance(target, torch.nn.Module) else {}

    def _writer(self, obj, attribute):
        """The upstream code that last wrote `attribute` on `obj` ("file function()"), or None
        (no audit, the user's own write, or one the audit cannot see)."""
        if self._writers is None or obj is None:
            return None
        origin = self._writers.last(obj, attribute)
        return None if origin is None else f"{origin.file} {origin.function}()"

    def _field_writers(self, objects, live):
        """{I9 field path: who last wrote it} on this rank, for the fields I9 compares."""
        if self._writers is None:
            return {}
        out = {}
        for name, param in objects.items():
            for field_name, attribute in _PARAM_FIELD_ATTRIBUTES.items():
                writer = self._writer(param, attribute)
                if writer is not None:
                    out[f"state.params[{name!r}].{field_name}"] = writer
        if len(live) == 1:
            self._writers.watch_also(live[0].engine)  # its counters' writes from now on
            for counter in _ENGINE_COUNTERS:
                writer = self._writer(live[0].engine, counter)
                if writer is not None:
                    out[f"state.steps.{counter}"] = writer
        return out

    def _safely(self, index, op, what, check):
        try:
            return check()
        except Exception:  # noqa: BLE001 - the harness's own failure, said as such
            return [self._check_failed(index, op, what)]

    def _check_failed(self, index, op, what):
        text = traceback.format_exc()
        last = text.strip().splitlines()[-1]
        return Finding(invariant="op", op_index=index, op=f"{op} ({what} check)", exception=text,
                       message=f"zerocheck's {what} check after op {index} ({op}) raised {last}: "
                               f"a bug of the harness, not of the engine")

    # ---- the model's view of the target --------------------------------------------------------

    def _reference_model(self):
        if self._reference is None:
            self._reference = build_tree(self.scenario).root
        return self._reference

    def _expected_params(self, target):
        """[(name, shape, numel, requires_grad)] of the engine's module, from a pristine build."""
        if target is None:
            return []
        model = self._reference_model()
        path = self._path_of(target)
        if path is None:
            return []
        module = model.get_submodule(path)
        return [(n, tuple(p.shape), p.numel(), p.requires_grad) for n, p in module.named_parameters()]

    def _path_of(self, target):
        # The replay's tree and the reference have the same structure: find the target by path.
        root = self._root
        for path, module in root.named_modules():
            if module is target:
                return path
        return None

    def bind(self, root):
        """The user's model (the replay's tree), to name an engine's target by its path."""
        self._root = root

    # ---- I3 ---------------------------------------------------------------------------------

    def _following(self):
        return self._stopped is None and self._twin is not None and self._twin.target is not None

    def _sum_order(self):
        """At world >= 3: "exact" before any optimizer step, "bounded" after the first one of the
        engine the twin follows, "unchecked" after more (or after one of an earlier engine, or of a
        run resumed from another world's save: its first step here is not the run's first)."""
        if self.world_size < 3 or self._boundaries == 0:
            return "exact"
        # The bound follows the sum order, not a clip coefficient computed from another norm.
        clips = self._training is not None and self._training.gradient_clipping > 0
        if (self._boundaries == 1 and self._boundaries_before_engine == 0 and not self._resumed
                and not clips):
            return "bounded"
        return "unchecked"

    def _loss_check(self, index, op, mine, twin_loss):
        if self._sum_order() != "exact":
            self.tally.skip("I3", _AFTER_FIRST_STEP)
            return []
        self.tally.done("I3")
        if mine == twin_loss or (mine != mine and twin_loss != twin_loss):
            return []
        return [Finding(
            invariant="I3", op_index=index, op=op, attribute="loss", origin=self._located,
            expected=twin_loss, actual=mine,
            message=f"rank {self.rank}'s loss {mine!r} differs from the dense twin's {twin_loss!r} "
                    f"for its micro-batch")]

    def _parity(self, index, op, state, assembled, stepped=False, objects=None, masters=()):
        """I3 findings: each parameter whose value (assembled from the shards, or a whole copy)
        differs from the twin's; with 16-bit parameters also each whose fp32 master some rank
        saw differ after a step (`masters`, _masters_that_differ) while its value agrees."""
        if not self._following():
            self.tally.skip("I3", self._stopped or "no engine the twin follows")
            return []
        order = self._sum_order()
        if order == "unchecked":
            self.tally.skip("I3", _AFTER_FIRST_STEP)
            return []
        bounded = order == "bounded"
        self.tally.done("I3")
        values = self._twin.values()
        findings = []
        for p in state.params:
            expected = values.get(p.name)
            if expected is None:
                continue  # not the model's parameter: I9 and I4 report the list
            copies = []  # (attribute, what it is, the tensor)
            if p.name in assembled:
                copies.append(("value", "assembled from the ranks' shards", assembled[p.name]))
            # A copy the rank holds as whole: a released stage-3 parameter's data is I4's concern.
            whole = state.layout != "partitioned" or p.status == "AVAILABLE"
            if whole and p.data is not None and p.data.numel() == expected.numel() and expected.numel():
                copies.append(("whole copy", f"held whole on rank {self.rank}", p.data))
            tolerance = self._first_step_bound(p.name, expected) if bounded else None
            for attribute, what, actual in copies:
                gap = difference(expected, actual.reshape(expected.shape), tolerance)
                if gap is None:
                    continue
                origin = self._origin(p.name, stepped)
                if attribute == "whole copy" and (origin or {}).get("action") != "located":
                    # Not located inside the operation: who made the copy tells a gather read
                    # early from a copy never refreshed.
                    writer = self._writer((objects or {}).get(p.name), "data")
                    if writer is not None:
                        origin = dict(origin or {"action": "not located"}, written_by=writer)
                findings.append(Finding(
                    invariant="I3", op_index=index, op=op, module_path=self._module_of(p.name),
                    param=p.name.rpartition(".")[2],
                    attribute=attribute + (" after a gathered edit" if self._after_gathered_edit
                                           else ""),
                    expected="the dense twin's value", actual=gap,
                    origin=origin,
                    message=f"parameter {p.name!r} ({what}) differs from the dense twin's after "
                            f"op {index} ({op}): {describe_gap(gap)}"))
                break  # the assembled copy speaks for the parameter; a whole copy only alone
        differing = {f.module_path + "." + f.param if f.module_path else f.param for f in findings}
        for name in masters:
            if name in differing or name not in values:
                continue
            findings.append(Finding(
                invariant="I3", op_index=index, op=op, module_path=self._module_of(name),
                param=name.rpartition(".")[2], attribute="fp32 master",
                expected="the dense twin's fp32 master", actual="differs on some rank",
                origin=self._origin(name, stepped),
                message=f"parameter {name!r}'s fp32 master differs from the dense twin's after "
                        f"op {index} ({op}), though its 16-bit value agrees"))
        return findings

    # ---- I3's root cause: where inside the operation the engine first parts from the twin --------

    def _observed_inside(self, live, adapter):
        """What the adapter read inside the engine since the last check (every live engine's is
        taken, so none piles up), or None: several engines, or an adapter that cannot read it."""
        observed = []
        for engine in live:
            try:
                observed.append(adapter.inside(engine.engine))
            except Exception:  # noqa: BLE001 - the root cause falls back to the operation's
                observed.append(None)
        return observed[0] if len(observed) == 1 else None

    def _locate(self, twin_inside, observed, expected):
        """This rank's first quantity inside the last backward or step that differs from the
        twin's (inside.py), or None. Only where the twin's numbers are the engine's bits: world 2
        at most (Gloo sums in its own order beyond)."""
        if (twin_inside is None or observed is None or "I3" not in self.enabled
                or self.world_size > 2 or not self._following()):
            return None
        params = [(name, numel) for name, _, numel, grad in expected if grad]
        try:
            if twin_inside[0] == "backward":
                _, gradients, accumulated = twin_inside
                precision = self._training.precision
                return inside.locate_backward(
                    observed, gradients, accumulated, self.rank, self.world_size,
                    self._training.divide_before_sum, params,
                    None if precision.plain else precision)
            if twin_inside[0] == "gather":
                _, before, after = twin_inside
                return inside.locate_gather(observed, before, after,
                                            [(name, numel) for name, _, numel, _ in expected])
            if twin_inside[0] == "load":
                _, values, optimizer_state = twin_inside
                return inside.locate_load(observed, values, optimizer_state, self.rank,
                                          self.world_size, params)
            _, used, clipped, before, after = twin_inside
            return inside.locate_step(observed, used, clipped, before, after, self.rank,
                                      self.world_size, params)
        except Exception:  # noqa: BLE001 - never a finding: the root cause falls back
            return None

    def _masters_that_differ(self, twin_inside, observed, expected):
        """After a step with 16-bit parameters, the parameters whose fp32 master on this rank
        differs from the twin's ([]: none, or not compared). Where _locate compares: the twin's
        bits are the engine's at world 2 at most."""
        if (twin_inside is None or twin_inside[0] != "step" or observed is None
                or "I3" not in self.enabled or self.world_size > 2 or not self._following()
                or not self._training.precision.mixed):
            return []
        try:
            return inside.masters_that_differ(
                observed, twin_inside[4], self.rank, self.world_size,
                [(name, numel) for name, _, numel, grad in expected if grad])
        except Exception:  # noqa: BLE001 - the values are still compared
            return []

    def _first_located(self, index, op, everyone):
        """Keeps the scenario's first place where the engine parts from the twin (the earliest
        quantity any rank saw differ: every rank keeps the same)."""
        found = inside.earliest(everyone)
        if self._located is not None or found is None:
            return
        words = inside.described(found)
        with_gradient = None
        if words["phase"] == "step" and self._with_gradient is not None:
            with_gradient = found["param"] in self._with_gradient
        self._located = {"action": "located", "op": op, "op_index": index,
                         "param": found["param"], "quantity": words["quantity"],
                         "file": words["file"], "function": words["function"],
                         "got_gradient": with_gradient,
                         # a gather's own quantity says the edit: not "after" it
                         "after_gathered_edit": (self._after_gathered_edit
                                                 and words["phase"] != "gather")}
        if words["phase"] == "load":
            self._located["restored"] = words["restored"]

    def _origin(self, name, stepped):
        """What an I3 finding on parameter `name` says of its cause: where the engine first
        parted from the twin inside an operation, else (right after an optimizer step) whether
        the parameter got a gradient in it."""
        if self._located is not None:
            return self._located
        if stepped and self._with_gradient is not None:
            return {"action": "not located", "got_gradient": name in self._with_gradient}
        return None

    def _module_of(self, name):
        return name.rpartition(".")[0]

    def _first_step_bound(self, name, value):
        """Per element, how far the first step may move a parameter differently when the ranks'
        gradients are summed in another order (world >= 3), from the twin's step.

        Summing the same n terms in two orders differs by at most 2 * gamma_n * sum |term|
        (gamma_n = n u / (1 - n u), u = 2^-24; Higham, Accuracy and Stability, 4.2); the window's
        k reductions are added in the same order on both sides, so with n = W + k the reduced
        gradient g differs by d <= 2 gamma_n * sum |g_r / W|. The step then moves the parameter by
        SGD's first update lr * g (momentum's buffer starts as g): lr * d; or Adam's first update
        lr * g / (|g| + eps) (m and v start from g alone), whose slope is at most
        lr * eps / (max(|g| - d, 0) + eps)^2. Each side rounds its update and result on its own:
        a few units of lr's and the parameter's last place on top.
        """
        used, reductions = self._twin.last_step
        if name not in used:
            return torch.zeros_like(value)  # not stepped: it must not have moved at all
        grad, magnitude = used[name]
        u = 2.0 ** -24
        n = self.world_size + max(reductions, 1)
        d = 2 * (n * u / (1 - n * u)) * magnitude
        lr = self.scenario.lr
        if self.scenario.optimizer == "adam":
            eps = inspect.signature(torch.optim.Adam).parameters["eps"].default  # the replay's
            move = lr * d * eps / ((grad.abs() - d).clamp_min(0) + eps) ** 2 + 16 * u * lr
        else:
            move = lr * d
        last_place = torch.nextafter(value.abs(), torch.tensor(float("inf"))) - value.abs()
        return move * (1 + 4 * u) + 2 * last_place

    # ---- assembling shards ----------------------------------------------------------------------

    def _plan(self, state, expected):
        """(size, this rank's flat contribution): the shards in the order the model gives."""
        if state.layout == "partitioned":
            parts = []
            shards = {p.name: p.shard for p in state.params}
            for name, _, numel, _ in expected:
                parts.append(self._fit(shards.get(name), partition_model.chunk(numel, self.world_size)))
            flat = torch.cat(parts) if parts else torch.zeros(0)
            return flat.numel(), flat
        if state.layout == "flat":
            group = self._flat_group(expected)
            mine = state.flat_partitions[0] if len(state.flat_partitions) == 1 else None
            flat = self._fit(mine, group.partition)
            return flat.numel(), flat
        return 0, torch.zeros(0)

    @staticmethod
    def _fit(tensor, size):
        """`tensor` flattened, cut or NaN-padded to `size` (I4 reports a wrong size)."""
        out = torch.full((size,), float("nan"), dtype=torch.float32)
        if tensor is not None:
            t = tensor.detach().reshape(-1).float()
            n = min(size, t.numel())
            out[:n] = t[:n]
        return out

    def _flat_group(self, expected):
        trainable = [(n, numel) for n, _, numel, grad in expected if grad]
        return partition_model.flat_group(trainable, self.world_size)

    def _assemble(self, state, expected, gathered):
        """{name: whole value} from every rank's contribution (rank order, cut to the model's size)."""
        out = {}
        if state.layout == "partitioned":
            offset = 0
            for name, shape, numel, _ in expected:
                c = partition_model.chunk(numel, self.world_size)
                whole = torch.cat([g[offset:offset + c] for g in gathered])[:numel]
                out[name] = whole.reshape(shape)
                offset += c
        elif state.layout == "flat":
            group = self._flat_group(expected)
            flat = torch.cat(gathered)
            offset = 0
            shapes = {name: shape for name, shape, _, _ in expected}
            for name, numel in zip(group.names, group.numels):
                out[name] = flat[offset:offset + numel].reshape(shapes[name])
                offset += numel
        return out

    # ---- I4 -----------------------------------------------------------------------------------

    def _partitions(self, index, op, state, expected, event, objects=None):
        if state.layout == "whole":
            self.tally.skip("I4", "the engine keeps a whole copy on every rank (no partitions)")
            return []
        self.tally.done("I4")
        findings = []

        def bad(name, rule, expected_value, actual, text, storage=None):
            # `storage`: the parameter's attribute holding what the rule judges; who last wrote
            # it left the wrong storage (a release that kept the data, a gather never undone).
            writer = self._writer((objects or {}).get(name), storage) if storage else None
            origin = None
            if writer is not None:
                origin = {"action": "left", "attribute": storage, "writer": writer}
                text += f"; its {storage} was last written by {writer}"
            findings.append(Finding(
                invariant="I4", op_index=index, op=op, module_path=self._module_of(name),
                param=name.rpartition(".")[2] if name else None, attribute=rule,
                expected=expected_value, actual=actual, message=text, origin=origin))

        names = [n for n, _, _, _ in expected]
        if [p.name for p in state.params] != names:
            bad("", "parameter list", names, [p.name for p in state.params],
                f"the engine's parameters {[p.name for p in state.params]} are not the model's {names}")
            return findings
        if state.layout == "flat":
            self._flat_partitions(index, op, state, expected, bad, event)
            return findings
        threshold = self.scenario.config["zero_optimization"]["stage3_param_persistence_threshold"]
        persistent = partition_model.persistent_names([(n, numel) for n, _, numel, _ in expected],
                                                      threshold)
        for p, (name, shape, numel, _) in zip(state.params, expected):
            c = partition_model.chunk(numel, self.world_size)
            shard_numel = p.shard.numel() if p.shard is not None else None
            if shard_numel != c:
                bad(name, "shard size", c, shard_numel,
                    f"parameter {name!r} ({numel} elements): rank {self.rank}'s shard holds "
                    f"{shard_numel} elements, the partition rule gives "
                    f"ceil({numel}/{self.world_size}) = {c}", storage="ds_tensor")
            held = p.data.numel()
            if p.status == "NOT_AVAILABLE" and held != 0:
                bad(name, "released but holding data", 0, held,
                    f"parameter {name!r} is NOT_AVAILABLE on rank {self.rank} but its data holds "
                    f"{held} elements", storage="data")
            if p.status == "AVAILABLE" and tuple(p.data.shape) != shape:
                bad(name, "available but not whole", list(shape), list(p.data.shape),
                    f"parameter {name!r} is AVAILABLE on rank {self.rank} with shape "
                    f"{list(p.data.shape)}, not its {list(shape)}", storage="data")
            wants = None
            if event == "initialized":
                wants = "NOT_AVAILABLE"
                rule = "partitioned after initialize"
            elif event == "boundary":
                wants = "AVAILABLE" if name in persistent else "NOT_AVAILABLE"
                rule = ("persistent parameter whole after the step" if name in persistent
                        else "released after the step")
            if wants is not None and (p.status != wants or (wants == "NOT_AVAILABLE" and held)):
                bad(name, rule, wants, f"{p.status} holding {held} elements",
                    f"parameter {name!r} ({numel} elements, "
                    f"{'persistent' if name in persistent else 'partitioned'} "
                    f"at threshold {threshold}) after op {index} ({op}) on rank {self.rank}: "
                    f"{p.status} holding {held} elements, expected {wants}"
                    + (" with no data" if wants == "NOT_AVAILABLE" else " and whole"),
                    storage="data")
        return findings

    def _flat_partitions(self, index, op, state, expected, bad, event):
        # Stage 2 partitions gradients: each backward reduces them into the flat partitions and
        # drops the module's .grad (stage_1_and_2.py `reduce_ipg_grads` -> clear_grad_attribute).
        # Stage 1 reduces them in the backward before a boundary step, and drops them too.
        for p in state.params:
            if p.grad_numel is not None and p.requires_grad and (
                    state.stage == 2 or (state.stage == 1 and event == "boundary")):
                rule = ("gradient partitioned" if state.stage == 2
                        else "gradient reduced before the step")
                bad(p.name, rule, None, p.grad_numel,
                    f"parameter {p.name!r} holds a whole gradient of {p.grad_numel} elements on "
                    f"rank {self.rank} after op {index} ({op}); ZeRO stage {state.stage} keeps "
                    f"gradients only in its flat partitions by then")
        group = self._flat_group(expected)
        if [list(g) for g in state.flat_group_names] != [list(group.names)]:
            bad("", "optimizer groups", [list(group.names)], state.flat_group_names,
                f"the optimizer's flat groups hold {state.flat_group_names}, the model's one group "
                f"{list(group.names)}")
            return
        mine = state.flat_partitions[0].numel()
        if mine != group.partition:
            bad("", "flat partition size", group.partition, mine,
                f"rank {self.rank}'s flat partition holds {mine} elements; {sum(group.numels)} "
                f"elements padded to {group.padded} give {group.partition} per rank")
        for field_name, numel in sorted((state.optimizer_state_numels or [{}])[0].items()):
            if numel not in (1, group.partition):  # Adam's step is a number
                bad("", "optimizer state size", group.partition, numel,
                    f"rank {self.rank}'s optimizer state {field_name!r} holds {numel} elements, "
                    f"not its partition's {group.partition}")

    def _given_back(self, index, op):
        """I4 after a release: the engine lets go of the model with every parameter whole again
        (SCENARIO_FORMAT.md, `release`): each holds the elements the scenario gives it."""
        self.tally.done("I4")
        findings = []
        for name, p, numel in not_whole(self._root, self._reference_model()):
            held = p.data.numel()
            writer = self._writer(p, "data")
            findings.append(Finding(
                invariant="I4", op_index=index, op=op, module_path=self._module_of(name),
                param=name.rpartition(".")[2], attribute="given back whole",
                expected=f"{numel} elements", actual=f"{held} elements",
                origin={"action": "left", "attribute": "data", "writer": writer} if writer else None,
                message=f"after op {index} ({op}) parameter {name!r} holds {held} of its {numel} "
                        f"elements: the release did not give the model back whole"
                        + (f"; its data was last written by {writer}" if writer else "")))
        return findings

    # ---- I9 -----------------------------------------------------------------------------------

    def _summary(self, state):
        params = []
        for p in state.params:
            whole = p.data is not None and p.data.numel() > 0 and (
                state.layout != "partitioned" or p.status == "AVAILABLE")
            params.append({"name": p.name, "shape": list(p.reported_shape),
                           "shard": None if p.shard is None else p.shard.numel(),
                           "status": p.status, "held": p.data.numel(),
                           "whole_copy": _digest(p.data) if whole else None})
        return {"layout": state.layout, "stage": state.stage, "params": params,
                "flat": [t.numel() for t in state.flat_partitions], "steps": dict(state.steps)}

    def _agreement(self, index, op, everyone):
        writers = [s.get("writers") or {} for s in everyone]
        everyone = [{k: v for k, v in s.items() if k not in RANKS_OWN_VIEWS} for s in everyone]
        if all(s == everyone[0] for s in everyone[1:]):
            return []
        field_name, values = _first_difference([{k: v for k, v in s.items() if k != "plan"}
                                                for s in everyone])
        if field_name is None:  # only the plans differ: the shard sizes, reported as such
            field_name, values = "shard sizes", [s["plan"] for s in everyone]
        ranks = ", ".join(f"rank {r}: {v!r}" for r, v in enumerate(values))
        message = f"after op {index} ({op}) the ranks disagree on {field_name}: {ranks}"
        written = [w.get(field_name) for w in writers]
        origin = None
        if any(written):  # every rank says who last wrote its value (None: no upstream write)
            origin = {"action": "last written", "writers": written}
            message += "; last written by " + ", ".join(
                f"rank {r}: {w or 'no upstream code'}" for r, w in enumerate(written))
        return [Finding(
            invariant="I9", op_index=index, op=op, module_path=None, attribute=_field_kind(field_name),
            expected=values[0], actual={str(r): v for r, v in enumerate(values)},
            message=message, origin=origin)]

    def _exchange_failed(self, index, op, error):
        return Finding(invariant="I9", op_index=index, op=op, attribute="exchange",
                       exception=str(error),
                       message=f"the ranks did not all reach the check after op {index} ({op}): {error}")


def _first_difference(summaries):
    """(a readable field path, the per-rank values) of the first field where ranks differ."""
    def walk(values, path):
        first = values[0]
        if all(v == first for v in values[1:]):
            return None
        if all(isinstance(v, dict) for v in values) and all(v.keys() == first.keys() for v in values):
            for key in first:
                found = walk([v[key] for v in values], f"{path}.{key}" if path else key)
                if found:
                    return found
        if all(isinstance(v, list) for v in values) and all(len(v) == len(first) for v in values):
            for i in range(len(first)):
                item = first[i]
                named = isinstance(item, dict) and "name" in item
                label = f"{path}[{item['name']!r}]" if named else f"{path}[{i}]"
                found = walk([v[i] for v in values], label)
                if found:
                    return found
        return path, values
    return walk(summaries, "") or (None, None)


def _field_kind(path):
    """The field without the parameter's name: "state.params[...].status" -> "status"."""
    last = path.rpartition(".")[2]
    return last.split("[")[0] if last else path
