"""What runs after every operation of the replay, and around each adapter call.

`check` runs I1 and I2 (and, with an exchange, I3, I4 and I9) after the build and after every
operation, and reports each finding once; `attempt` turns whatever an adapter call raises into a
finding; `raised_by`, `changed_by` and `written_by` name the upstream code behind a finding;
`skip` records an operation with nothing to act on. Each takes the replay (replay.Replay) whose
state it reads; findings carry the operation index `replay.index`.
"""

import re

from ..findings.verdict import NEW_INVARIANTS, Finding
from ..oracles import oracles
from ..oracles.ledger import ObjectKey, WriteSkipped
from ..scenario import schema
from .state import LiveEngine

# The invariants about the user's attributes, whose findings name the writer.
_ATTRIBUTE_INVARIANTS = schema.some("invariants", "I1", "I2")
# A fingerprint change of an attribute (the keys of oracles/fingerprint.py).
_CHANGED_ATTRIBUTE = re.compile(r"^(module|parameter) '([^']*)' attribute '([^']*)': ")


def check(replay, label):
    """The checks after the build or an operation (`label`: "build" or the operation's name)."""
    findings = oracles.check_user_attributes(replay.ledger, replay.index, label)
    findings += replay.placement.check(replay.index, label)
    if replay.numerics is not None:
        engines = replay.live + [LiveEngine(e, None, None) for e in replay.accepted_repeats]
        findings += replay.numerics.check(replay.index, label, engines, replay.adapter)
    fresh = []
    for finding in findings:
        # A clobbered attribute stays clobbered; report it when it first appears (or changes).
        # A parameter that left the twin's trajectory stays off it: its first divergence (and
        # a partition rule's or a disagreement's first break) is the finding.
        key = (finding.invariant, finding.module_path, finding.param, finding.attribute)
        if finding.invariant not in NEW_INVARIANTS:
            key += (repr(finding.expected), repr(finding.actual))
        if key not in replay.reported:
            replay.reported.add(key)
            if finding.invariant in _ATTRIBUTE_INVARIANTS:
                written_by(replay, finding)
            fresh.append(finding)
    report(replay, fresh)


def report(replay, findings):
    """Adds `findings` to the replay's result, each with its module's node kind."""
    for finding in findings:
        # The node kind makes a finding's signature; a parameter's is its module's.
        if finding.module_path is not None and finding.node_kind is None:
            finding.node_kind = replay.node_kinds.get(finding.module_path)
    replay.result.findings.extend(findings)


def skip(replay, label, what, reason):
    """Records that `label` (an operation's name, or "" before the first) skipped `what`."""
    replay.result.skipped.append({"op_index": replay.index, "op": label, "what": what,
                                  "reason": reason})


def attempt(replay, label, action, cause=None):
    """Runs `action`: returns (True, result), or (False, None) after reporting its error.
    `cause()`: called only when no upstream frame raised it: what earlier operation left the
    state it failed on (the finding's `after`), or None."""
    try:
        return True, action()
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # SystemExit from a library is a finding too, not our exit
        finding = raised_by(replay, Finding(
            invariant="op", op_index=replay.index, op=label, expected="no exception",
            actual=type(e).__name__, exception=f"{type(e).__name__}: {e}",
            message=f"{label} raised {type(e).__name__}: {e}"), e)
        if finding.origin is None and cause is not None:
            finding.after = cause()
            if finding.after is not None:
                finding.message += f" ({finding.after['why']})"
        report(replay, [finding])
        return False, None


def raised_by(replay, finding, exception):
    """Names the innermost upstream frame that raised `exception` in `finding`."""
    origin = replay.upstream.raiser(exception)
    if origin is not None:
        finding.origin = origin.to_json()
        finding.message += f" (raised at {origin.describe()})"
    return finding


def changed_by(replay, finding, changes):
    """Names the upstream code that wrote the first changed attribute the audit saw."""
    if replay.audit is None:
        return
    for change in changes:
        match = _CHANGED_ATTRIBUTE.match(change)
        if not match:
            continue
        kind, path, name = match.groups()
        try:
            obj = (replay.root.get_submodule(path) if kind == "module"
                   else replay.root.get_parameter(path))
        except Exception:  # noqa: BLE001 - gone since: nobody to name
            continue
        origin = replay.audit.last(obj, name)
        if origin is not None:
            finding.origin = origin.to_json()
            finding.message += f"; {kind} {path!r} attribute {name!r} by {origin.describe()}"
            return


def written_by(replay, finding):
    """Names the upstream code that last wrote or deleted an I1/I2 finding's attribute, or that
    raised when its object was read."""
    if finding.exception and finding.param:
        try:
            replay.ledger.lookup(ObjectKey(finding.module_path, finding.param))
        except WriteSkipped as e:
            if e.__cause__ is not None:  # reading the parameter ran upstream code that raised
                raised_by(replay, finding, e.__cause__)
        return
    if replay.audit is None or not finding.attribute or finding.exception:
        return
    try:
        obj = replay.ledger.lookup(ObjectKey(finding.module_path, finding.param or ""))
    except Exception:  # noqa: BLE001 - the object is gone: nobody to name
        return
    origin = replay.audit.last(obj, finding.attribute)
    if origin is None:
        finding.message += ("; no upstream write of it was seen (an in-place change, or a "
                            "write around __setattr__)")
        return
    finding.origin = origin.to_json()
    verb = "deleted" if origin.action == "deleted" else "overwritten"
    finding.message += f"; {verb} by {origin.describe()}"
