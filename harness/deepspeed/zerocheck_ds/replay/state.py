"""The records the replay's state is made of, shared by the operation families.

`Replay` (replay.py) is the state of one scenario on one rank; the operations (lifecycle.py,
training.py, attributes.py, checkpoints.py) and the checks after each (checks.py) read and change
it. What they share besides is here: a live engine, the result a replay returns, and the user's
optimizer as the scenario names it (the repro scripts build the same one).
"""

from dataclasses import dataclass, field

import torch

from ..scenario import schema


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
    # I10 (suite): what trace.Trace recorded after the build and every operation, and the knobs
    # this replay drew again ({name: [old, new]}); empty unless the job asked.
    trace: list = field(default_factory=list)
    knobs: dict = field(default_factory=dict)


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
