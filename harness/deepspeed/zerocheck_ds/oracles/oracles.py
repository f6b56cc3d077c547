"""The invariants an upstream replay checks: I1 user attributes, I2 placement, I5 registry.

I1  every attribute the user wrote (or deleted) on every module and parameter still equals the
    user's last write, read from the live objects through the user's own model reference.
I2  each placed module's owner, computed by the scenario's policy from the attributes as the
    user set them, equals the owner computed from the live objects.
I5  a repeated initialize of a managed model, submodule or optimizer is refused, changes
    nothing (a fingerprint of every module, parameter and optimizer, taken without reading
    parameter data), and training still runs afterwards.

No oracle reads parameter data: an upstream engine may have emptied or moved it.
"""

from ..model import values
from ..scenario import schema
from ..findings.verdict import Finding
from .ledger import ObjectKey, WriteSkipped

_MAX_LISTED_CHANGES = 10
# The engine's error kind for a refused repeated initialize (engine/errors.h).
_REFUSED = schema.some("error_kinds", "AlreadyInitialized")[0]


def check_user_attributes(ledger, op_index, op):
    """I1: returns a finding per user attribute that no longer equals the user's last write."""
    findings = []
    for key, name, expected in ledger.expectations():
        exception = None
        try:
            actual = getattr(ledger.lookup(key), name, values.ABSENT)
        except WriteSkipped as e:  # gone, or reading it raised (its __cause__)
            actual = values.ABSENT
            exception = str(e) if e.__cause__ is not None else f"the object is gone: {e}"
        except Exception as e:  # an engine's descriptor may raise on read
            actual, exception = values.ABSENT, f"{type(e).__name__}: {e}"
        if exception is None and values.same_literal(expected, actual):
            continue
        findings.append(Finding(
            invariant="I1", op_index=op_index, op=op, module_path=key.module, param=key.param,
            attribute=name, expected=values.to_json(expected), actual=values.to_json(actual),
            exception=exception,
            message=(f"{key.describe()} attribute {name!r}: expected {values.describe(expected)}, "
                     f"got {values.describe(actual)}")))
    return findings


class PlacementOracle:
    """I2 for one scenario: attr_mod over the MoE experts, or a map of module paths."""

    def __init__(self, scenario, ledger):
        self._policy = scenario.placement
        self._world_size = scenario.world_size
        self._ledger = ledger
        self.skipped = []  # (what, reason) for map entries naming no module
        self._placed = {}  # path -> the module object the user placed
        if self._policy.kind == "attr_mod":
            for path in ledger.built.expert_paths:
                self._placed[path] = ledger.lookup(ObjectKey(path, ""))
        elif self._policy.kind == "map":
            for path in self._policy.owners:
                try:
                    self._placed[path] = ledger.resolve(path)[0]
                except WriteSkipped as e:
                    self.skipped.append((f"placement.owners[{path!r}]", str(e)))

    @property
    def placed_paths(self):
        """The paths of the modules the policy places (an engine places them on an owner)."""
        return list(self._placed)

    def check(self, op_index, op):
        """Returns a finding per placed module whose computed owner changed."""
        findings = []
        for path, original in self._placed.items():
            expected, expected_basis = self._expected_owner(path)
            actual, actual_basis = self._live_owner(path, original)
            if expected == actual:
                continue
            findings.append(Finding(
                invariant="I2", op_index=op_index, op=op, module_path=path, param="",
                attribute=self._policy.attr or None, expected=expected, actual=actual,
                message=(f"module {path!r}: owner rank {expected} ({expected_basis}) "
                         f"became {actual} ({actual_basis})")))
        return findings

    def _owner(self, value):
        if type(value) is int:
            return value % self._world_size
        return None

    def _expected_owner(self, path):
        if self._policy.kind == "map":
            # Which rank holds a module is not observable upstream; what the map promises the
            # user is that PATH still names the module they placed.
            return f"rank {self._policy.owners[path]}, the user's module", "placement map"
        value = self._ledger.expected(ObjectKey(path, ""), self._policy.attr, values.ABSENT)
        return self._owner(value), f"user's {self._policy.attr}={values.describe(value)}"

    def _live_owner(self, path, original):
        try:
            live = self._ledger.built.root.get_submodule(path)
        except Exception as e:
            return None, f"no module at this path any more: {type(e).__name__}"
        if live is not original:
            return None, f"the user's module at this path was replaced by a {type(live).__name__}"
        if self._policy.kind == "map":
            return f"rank {self._policy.owners[path]}, the user's module", "placement map"
        try:
            value = getattr(live, self._policy.attr, values.ABSENT)
        except Exception as e:
            return None, f"reading {self._policy.attr} raised {type(e).__name__}: {e}"
        return self._owner(value), f"live {self._policy.attr}={values.describe(value)}"


class ManagedObjects:
    """The oracle's own model of which initialize calls a correct engine must refuse."""

    def __init__(self):
        self._modules = set()  # ids of every module some live engine manages
        self._optimizers = set()

    def refusal_reason(self, target, optimizer):
        """Returns why initializing `target` with `optimizer` must be refused, or None."""
        if any(id(m) in self._modules for m in target.modules()):
            return "a live engine already manages the target or one of its modules"
        if optimizer is not None and id(optimizer) in self._optimizers:
            return "the optimizer already belongs to a live engine"
        return None

    def add(self, target, optimizer):
        self._modules.update(id(m) for m in target.modules())
        if optimizer is not None:
            self._optimizers.add(id(optimizer))

    def clear(self):
        self._modules.clear()
        self._optimizers.clear()


def judge_repeated_initialize(adapter, op_index, why_refused, exception, changes):
    """I5: returns the findings for one repeated initialize, given how it went."""
    findings = []
    if exception is None:
        findings.append(Finding(
            invariant="I5", op_index=op_index, op="initialize", expected=_REFUSED,
            actual="accepted",
            message=f"a repeated initialize was accepted ({why_refused}); it must be refused"))
    elif not adapter.is_refusal(exception):
        findings.append(Finding(
            invariant="I5", op_index=op_index, op="initialize", expected=_REFUSED,
            actual=type(exception).__name__, exception=_exception_text(exception),
            message=f"a repeated initialize failed with an error that is not a refusal: "
                    f"{_exception_text(exception)}"))
    if changes:
        state = "accepted" if exception is None else "refused"
        listed = changes[:_MAX_LISTED_CHANGES]
        if len(changes) > len(listed):
            listed.append(f"... and {len(changes) - len(listed)} more")
        findings.append(Finding(
            invariant="I5", op_index=op_index, op="initialize", expected="nothing changed",
            actual=listed,
            message=f"the {state} repeated initialize changed {len(changes)} thing(s) in the "
                    f"model or optimizers, e.g. {changes[0]}"))
    return findings


def training_still_runs_finding(op_index, refused, exception):
    """I5: the finding when training fails after a repeated initialize."""
    state = "rejected" if refused else "repeated"
    return Finding(
        invariant="I5", op_index=op_index, op="initialize",
        attribute=f"training still runs after a {state} initialize", expected="forward runs",
        actual="raised", exception=_exception_text(exception),
        message=f"training no longer runs after a {state} initialize: {_exception_text(exception)}")


def _exception_text(exception):
    return f"{type(exception).__name__}: {exception}"
