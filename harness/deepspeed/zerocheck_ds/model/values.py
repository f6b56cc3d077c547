"""Attribute values: scenario literals turned into live Python objects, compared and rendered.

Comparison is type-strict, like the C++ AttrValue: 1 is not 1.0, not True and not numpy's 1,
a list is not a tuple, a tensor equals only a plain float32 CPU tensor of the same shape and
elements. Anything an engine put in place of the user's value is rendered for the verdict
without reading parameter data (an upstream engine may have emptied or moved it).
"""

import json
import math

import torch

from ..scenario.scenario import TensorLiteral

# Values an engine leaves on a user's attribute can be anything; keep the verdict readable.
_MAX_RENDERED_ELEMENTS = 64
_MAX_REPR_CHARS = 200


class _Absent:
    """The attribute does not exist (never written, or deleted by the user)."""

    def __repr__(self):
        return "<absent>"


ABSENT = _Absent()


def to_live(literal):
    """Returns a fresh live object for a literal (a new list or tensor each call)."""
    if isinstance(literal, TensorLiteral):
        return torch.tensor(list(literal.values), dtype=torch.float32).reshape(literal.shape)
    if isinstance(literal, tuple):
        return [to_live(v) for v in literal]
    return literal


def same(expected, actual):
    """Returns whether `actual` (a live object) equals the literal `expected`, type included."""
    if expected is ABSENT or expected is None:
        return actual is expected
    if isinstance(expected, TensorLiteral):
        return _same_tensor(expected, actual)
    if isinstance(expected, tuple):
        return (type(actual) is list and len(actual) == len(expected)
                and all(same(e, a) for e, a in zip(expected, actual)))
    return type(actual) is type(expected) and actual == expected


def _same_tensor(expected, actual):
    # Only a plain CPU float32 tensor can be the user's value; anything else differs, and its
    # data is never read (it may be a partitioned parameter or live on a GPU).
    if type(actual) is not torch.Tensor or actual.dtype != torch.float32:
        return False
    if actual.device.type != "cpu" or tuple(actual.shape) != expected.shape:
        return False
    return torch.equal(actual, to_live(expected))


def to_json(value, depth=0):
    """Returns a JSON-ready rendering of a literal or a live object, for verdicts."""
    if value is ABSENT:
        return {"absent": True}
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, TensorLiteral):
        return {"tensor": list(value.values), "shape": list(value.shape)}
    if type(value) in (tuple, list) and depth < 8:
        return [to_json(v, depth + 1) for v in value]
    if isinstance(value, torch.Tensor):
        return _tensor_to_json(value)
    return {"type": _type_name(value), "repr": _safe_repr(value)}


def _tensor_to_json(tensor):
    shape = list(tensor.shape)
    plain_cpu = type(tensor) is torch.Tensor and tensor.device.type == "cpu"
    if plain_cpu and tensor.numel() <= _MAX_RENDERED_ELEMENTS:
        data = [float(x) for x in tensor.detach().reshape(-1).tolist()]
        return {"tensor": data, "shape": shape, "dtype": str(tensor.dtype)}
    # Parameters and device tensors: describe, never read.
    return {"type": _type_name(tensor), "shape": shape, "dtype": str(tensor.dtype),
            "device": str(tensor.device)}


def _type_name(value):
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def _safe_repr(value):
    try:
        text = repr(value)
    except Exception as e:  # a foreign object's repr may itself fail
        text = f"<repr failed: {type(e).__name__}>"
    return text if len(text) <= _MAX_REPR_CHARS else text[:_MAX_REPR_CHARS] + "..."


def describe(value):
    """A short one-line rendering for the human summary."""
    rendered = to_json(value)
    if rendered == {"absent": True}:
        return "<absent>"
    text = json.dumps(rendered, ensure_ascii=False)
    return text if len(text) <= 80 else text[:80] + "..."
