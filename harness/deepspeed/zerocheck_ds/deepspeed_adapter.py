"""The adapter over an installed DeepSpeed, kept thin on purpose.

It calls the public API only (deepspeed.initialize, engine(x, route), engine.backward,
engine.step, engine.zero_grad, engine.destroy) and assumes nothing else about the engine:
DeepSpeed installs hooks, empties parameters after partitioning and wraps the model as
`engine.module`, and the replay never looks behind that. Exceptions propagate to the replay,
which reports each as a finding with its text.

`import deepspeed` happens in the constructor, so a missing DeepSpeed is a clear usage error
before any scenario runs, and the rest of the package never imports it.
"""

import copy
import re
import sys

from .adapters import Adapter, AdapterUnavailable
from .tree import TakesRoute


# DeepSpeed's refusal of a repeated initialize: a ValueError or RuntimeError saying so. The repro
# scripts (repro_script.py) embed this same rule.
REFUSAL_TYPES = (ValueError, RuntimeError)
REFUSAL_PATTERN = r"already (been )?initiali[sz]ed"


class DeepSpeedAdapter(Adapter):
    name = "deepspeed"
    # DeepSpeed's training loop is forward, backward, step: a step with no backward since the
    # last one is outside its contract (ZeRO-3 raises KeyError), not a bug to report.
    step_needs_backward = True
    # Nor is a model without trainable parameters something DeepSpeed is for (IndexError).
    initialize_needs_parameters = True

    def __init__(self):
        try:
            import deepspeed
        except Exception as e:  # ImportError, or any error DeepSpeed raises while importing
            raise AdapterUnavailable(
                f"--adapter deepspeed needs DeepSpeed, but `import deepspeed` failed under "
                f"{sys.executable}: {type(e).__name__}: {e}. Install DeepSpeed for this Python, "
                f"or use --adapter passthrough or --adapter faulty.") from None
        self._deepspeed = deepspeed

    def version(self):
        return str(getattr(self._deepspeed, "__version__", "unknown"))

    def needs_process_group(self, world_size):
        # deepspeed.initialize wants torch.distributed even on one rank; without a group it
        # goes looking for MPI.
        return True

    def initialize(self, model, optimizer, config):
        config = copy.deepcopy(config)  # DeepSpeed annotates the dict it is given
        # The scenario's optimizer may be SGD, which ZeRO only takes with this flag; it changes
        # nothing else.
        config.setdefault("zero_allow_untested_optimizer", True)
        engine, _, _, _ = self._deepspeed.initialize(model=model, optimizer=optimizer,
                                                     config=config)
        return engine

    def is_refusal(self, exception):
        # DeepSpeed's own refusal, as the guarded deepspeed.initialize proposed upstream raises
        # it. Anything else raised by a repeated initialize (KeyError, IndexError, ...) is a
        # crash, not a refusal: counting it as one would hide exactly the bug being hunted.
        return (isinstance(exception, REFUSAL_TYPES)
                and re.search(REFUSAL_PATTERN, str(exception), re.IGNORECASE) is not None)

    def forward(self, engine, x, route):
        device = getattr(engine, "device", None)
        if device is not None:
            x = x.to(device)
        module = getattr(engine, "module", None)
        return engine(x, route) if isinstance(module, TakesRoute) else engine(x)

    def backward(self, engine, loss):
        engine.backward(loss)

    def step(self, engine):
        engine.step()

    def zero_grad(self, engine):
        engine.zero_grad()

    def release(self, engine):
        # destroy() exists in recent releases only; an older engine is simply dropped.
        destroy = getattr(engine, "destroy", None)
        if callable(destroy):
            destroy()
