"""First on a traced rank's PYTHONPATH (the suite's --coverage): starts coverage_trace's tracer
before anything imports the engine, then runs the sitecustomize this folder hides (the DeepSpeed
shims', which import DeepSpeed, or the system's), so the rank behaves as it would untraced."""

import importlib.machinery
import importlib.util
import os
import sys

from zerocheck_ds.suite import coverage_trace


def _run_hidden_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


try:  # a tracer that cannot start must not cost the rank its shims; site reports the error
    coverage_trace.start_from_environment()
finally:
    _run_hidden_sitecustomize()
