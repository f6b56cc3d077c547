"""Armed injections of non-finite values (the `inject` operation, SCENARIO_FORMAT.md "Injections").

An inject arms a one-shot value on one rank: "input" is consumed by the next forward (element 0 of
that rank's flattened input batch becomes the value), "loss" and "gradient" by the next backward
that runs (the loss that backward differentiates is multiplied by the value; the parameter's flat
element 0 of its gradient becomes the value once that rank's backward has produced it, before any
reduction or accumulation). A second inject of the same kind on the same rank before then replaces
the first; one never consumed does nothing.

Every rank keeps the whole world's arming (the scenario is the same on every rank): the replay
applies its own rank's, the dense twin every rank's, so the twin computes what DeepSpeed should.
`replaced_first` is the twin's rule (model/twin.py), one definition for both sides.
"""

from ..model.twin import replaced_first
from ..scenario.scenario import INJECT_VALUES


class Injections:
    """The world's armed injections: {(rank, into): (value, param)}. `placed`: the paths of the
    modules the scenario's placement policy places; a gradient injection into one of their
    parameters does nothing (SCENARIO_FORMAT.md: a placed module's gradient is its owner's sum
    of every sender's share on zerocheck's engine, which no one rank's backward produces; the
    language means the same on every engine)."""

    def __init__(self):
        self._armed = {}
        self.placed = []

    def arm(self, op):
        self._armed[(op.rank, op.into)] = (INJECT_VALUES[op.value], op.param)

    def take_inputs(self):
        """Consumes the armed inputs: {rank: value}."""
        return {rank: value for (rank, _), (value, _) in self._take(("input",)).items()}

    def take_backward(self):
        """Consumes the armed losses and gradients: ({rank: loss factor}, {rank: (param, value)})."""
        taken = self._take(("loss", "gradient"))
        losses = {rank: value for (rank, into), (value, _) in taken.items() if into == "loss"}
        gradients = {rank: (param, value) for (rank, into), (value, param) in taken.items()
                     if into == "gradient" and not self._in_placed(param)}
        return losses, gradients

    def _in_placed(self, param):
        return any(path == "" or param.startswith(path + ".") for path in self.placed)

    def _take(self, kinds):
        taken = {key: armed for key, armed in self._armed.items() if key[1] in kinds}
        for key in taken:
            del self._armed[key]
        return taken


def gradient_hook(parameter, value):
    """Registers a one-shot tensor hook on `parameter` (a leaf) that replaces its gradient's flat
    element 0 by `value`; returns the handle, or None for a parameter without gradient.

    A leaf's tensor hooks run on its summed gradient of the backward before its AccumulateGrad
    node, so before ZeRO-3's hooks on that node (v0.14.5 and master: tests/test_injection.py and
    the upstream scenarios show DeepSpeed reducing the replaced value)."""
    if not parameter.requires_grad:
        return None
    fired = []

    def hook(grad):
        if fired:
            return grad
        fired.append(True)
        return replaced_first(grad, value)

    return parameter.register_hook(hook)
