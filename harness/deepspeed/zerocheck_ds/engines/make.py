"""make_adapter: an engine under test by its name (ADAPTER_NAMES), above both adapter modules so
that the interface (adapters.py) never imports the DeepSpeed adapter that builds on it."""

from . import ADAPTER_NAMES
from .adapters import AdapterUnavailable, FaultyAdapter, PassThroughAdapter


def make_adapter(name):
    """Returns the adapter called `name`. Raises AdapterUnavailable when it cannot run here."""
    if name == "passthrough":
        return PassThroughAdapter()
    if name == "faulty":
        return FaultyAdapter()
    if name == "deepspeed":
        from .deepspeed_adapter import DeepSpeedAdapter  # imports deepspeed lazily
        return DeepSpeedAdapter()
    raise AdapterUnavailable(
        f"unknown adapter {name!r} (expected one of: {', '.join(ADAPTER_NAMES)})")
