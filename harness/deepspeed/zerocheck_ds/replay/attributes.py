"""The user's attribute operations of the replay: set_attr, del_attr.

Each takes the replay (replay.Replay) and the operation, and writes through the attribute ledger,
so I1 and I2 (checks.py) compare the model with the user's last write. A write the model cannot
represent (ledger.WriteSkipped) is recorded as skipped; a plain user write that the engine made
fail is an I1 finding.
"""

from ..findings.verdict import Finding
from ..oracles.ledger import WriteSkipped
from ..scenario import schema
from .checks import raised_by, report, skip

# This family's operations, each the function of its name (replay.py dispatches to them).
OPERATIONS = schema.some("ops", "set_attr", "del_attr")


def set_attr(replay, op):
    _user_write(replay, op, lambda: replay.ledger.write(op.module, op.param, op.name, op.value))


def del_attr(replay, op):
    _user_write(replay, op, lambda: replay.ledger.delete(op.module, op.param, op.name))


def _user_write(replay, op, write):
    what = f"{op.op} {op.name!r} on module {op.module!r}" + (
        f" parameter {op.param!r}" if op.param else "")
    try:
        write()
    except WriteSkipped as e:
        skip(replay, op.op, what, str(e))
    except Exception as e:  # the engine made a plain user write fail
        report(replay, [raised_by(replay, Finding(
            invariant="I1", op_index=replay.index, op=op.op, module_path=op.module,
            param=op.param, attribute=op.name, exception=f"{type(e).__name__}: {e}",
            message=f"the user's {what} raised {type(e).__name__}: {e}"), e)])
