"""Attribute values: scenario literals turned into live Python objects, compared and rendered.

Comparison is type-strict, like the C++ AttrValue: 1 is not 1.0, not True and not numpy's 1,
a list is not a tuple, a tensor equals only a plain float32 CPU tensor of the same shape and
elements. Anything an engine put in place of the user's value is rendered for the verdict
without reading parameter data (an upstream engine may have emptied or moved it).

`same`, `same_plain`, `show`, `show_plain` and ABSENT are the rules a repro script carries too:
they take live objects, need only torch, and the script writer copies their source
(repro_runtime.definitions). The replay compares a scenario literal with same_literal.
"""

import json
import math

import torch

from ..scenario.scenario import TensorLiteral

# Values an engine leaves on a user's attribute can be anything; keep the verdict readable.
_MAX_RENDERED_ELEMENTS = 64


# The attribute does not exist (never written, or deleted by the user): a value of its own kind.
ABSENT = type("Absent", (), {"__repr__": lambda self: "<absent>"})()


def to_live(literal):
    """Returns a fresh live object for a literal (a new list or tensor each call)."""
    if isinstance(literal, TensorLiteral):
        return torch.tensor(list(literal.values), dtype=torch.float32).reshape(literal.shape)
    if isinstance(literal, tuple):
        return [to_live(v) for v in literal]
    return literal


def same_literal(literal, actual):
    """Returns whether `actual` (a live object) equals the scenario's `literal`, type included."""
    return same(to_live(literal), actual)


def same(expected, actual):
    """Type-strict: 1 is not 1.0 nor True, and a tensor equals only a plain float32 CPU tensor
    (anything else differs and its data is never read: it may be a partitioned parameter or
    live on a GPU)."""
    if isinstance(expected, torch.Tensor):
        return (type(actual) is torch.Tensor and actual.dtype == torch.float32 and actual.device.type
                == "cpu" and actual.shape == expected.shape and torch.equal(actual, expected))
    if type(expected) is list:
        return type(actual) is list and len(actual) == len(expected) and all(map(same, expected, actual))
    return same_plain(expected, actual)


def same_plain(expected, actual):
    """same() for a value that is no tensor or list: ABSENT and None are only themselves."""
    plain = expected is not ABSENT and expected is not None
    return actual is expected or plain and type(actual) is type(expected) and actual == expected


def show(value, depth=0):
    """One line, never reading a parameter's data (an engine may have emptied or moved it)."""
    if type(value) is torch.Tensor and value.device.type == "cpu" and value.numel() <= 64:
        return f"tensor({value.tolist()}, dtype={value.dtype})"
    if type(value) is list and depth < 8:
        return "[" + ", ".join(show(v, depth + 1) for v in value) + "]"
    try:
        return show_plain(value)
    except Exception as e:  # a foreign object's repr may itself fail
        return f"<repr failed: {type(e).__name__}>"


def show_plain(value):
    """show() where the user wrote no tensor or list: any other tensor by its shape only. A repr
    that fails raises (the checks show what they read inside their own try)."""
    text = (f"{type(value).__name__}(shape={list(value.shape)}, dtype={value.dtype}, device="
            f"{value.device})" if isinstance(value, torch.Tensor) else repr(value))
    return text if len(text) <= 200 else text[:200] + "..."


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
    return show(value, depth=8)  # no tensor here: repr, cut at 200 characters, failing safely


def describe(value):
    """A short one-line rendering for the human summary."""
    rendered = to_json(value)
    if rendered == {"absent": True}:
        return "<absent>"
    text = json.dumps(rendered, ensure_ascii=False)
    return text if len(text) <= 80 else text[:80] + "..."
