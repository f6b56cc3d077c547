"""Strict JSON reading with JSON paths: the building blocks of the scenario and config readers.

Every problem raises ScenarioError whose message starts with the JSON path of the culprit
(`tree[3].children[0]: ...`, `$` for the document itself), the same rule as the C++ reader.
Python's json module is lenient where the C++ reader is not (duplicate keys, NaN, bools that
are ints), so those cases are refused here explicitly.

Torch-free on purpose: a malformed file is rejected before torch is imported.
"""

import json
import math
import re

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1

# Attribute names: 1..1024 bytes of valid UTF-8 without NUL (engine/attr_dict.h).
MAX_NAME_BYTES = 1024

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class ScenarioError(Exception):
    """Malformed scenario input. The message starts with the JSON path of the culprit."""


class _JsonObject(dict):
    """A decoded JSON object that remembers keys written more than once."""

    duplicates = ()


def _collect_pairs(pairs):
    obj = _JsonObject()
    seen_twice = []
    for key, value in pairs:
        if key in obj:
            seen_twice.append(key)
        obj[key] = value
    obj.duplicates = tuple(seen_twice)
    return obj


def _refuse_constant(name):
    # json.loads would turn NaN/Infinity into floats; they are not JSON.
    raise ValueError(f"{name} is not a JSON value")


def fail(path, message):
    raise ScenarioError(f"{path}: {message}")


def decode(text):
    """Returns the JSON document in `text`. Raises ScenarioError at `$` when it is not JSON."""
    try:
        return json.loads(text, object_pairs_hook=_collect_pairs, parse_constant=_refuse_constant)
    except json.JSONDecodeError as e:
        fail("$", f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}")
    except RecursionError:
        fail("$", "malformed JSON: nested too deeply")
    except ValueError as e:
        fail("$", f"malformed JSON: {e}")


def key_path(path, key):
    """Returns the path of `key` inside the object at `path`."""
    if _IDENTIFIER.match(key):
        return key if path == "$" else f"{path}.{key}"
    quoted = json.dumps(key)
    return f"$[{quoted}]" if path == "$" else f"{path}[{quoted}]"


def index_path(path, index):
    return f"{path}[{index}]"


def type_name(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def shown(value, limit=60):
    """A short rendering of a JSON value for messages."""
    text = json.dumps(value, ensure_ascii=False) if value is not None else "null"
    return text if len(text) <= limit else text[:limit] + "..."


def read_object(value, path, required=(), optional=()):
    """Returns the object at `path`. Raises on a non-object, a duplicate, unknown or missing key."""
    if not isinstance(value, dict):
        fail(path, f"expected an object, got {type_name(value)} {shown(value)}")
    for key in getattr(value, "duplicates", ()):
        fail(key_path(path, key), "duplicate key")
    allowed = set(required) | set(optional)
    for key in value:
        if key not in allowed:
            expected = ", ".join(sorted(allowed)) or "none"
            fail(key_path(path, key), f"unknown key (expected one of: {expected})")
    for key in required:
        if key not in value:
            fail(key_path(path, key), "missing required key")
    return value


def read_int(value, path, lo=INT64_MIN, hi=INT64_MAX):
    # bool is an int subclass in Python; `true` for an integer is always a mistake.
    if type(value) is not int:
        fail(path, f"expected an integer, got {type_name(value)} {shown(value)}")
    if value < lo or value > hi:
        fail(path, f"value {value} is out of range [{lo}, {hi}]")
    return value


def read_number(value, path):
    if type(value) not in (int, float):
        fail(path, f"expected a number, got {type_name(value)} {shown(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        fail(path, "number is out of range (not finite)")
    return value


def read_bool(value, path):
    if type(value) is not bool:
        fail(path, f"expected a boolean, got {type_name(value)} {shown(value)}")
    return value


def read_string(value, path):
    if not isinstance(value, str):
        fail(path, f"expected a string, got {type_name(value)} {shown(value)}")
    return value


def read_array(value, path, lo=0, hi=None):
    if not isinstance(value, list):
        fail(path, f"expected an array, got {type_name(value)} {shown(value)}")
    if len(value) < lo or (hi is not None and len(value) > hi):
        bound = f"{lo}..{hi}" if hi is not None else f"at least {lo}"
        fail(path, f"array of {len(value)} elements; expected {bound}")
    return value


def name_problem(name):
    """Returns why `name` is not an attribute name, or "" when it is one."""
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "name is not valid UTF-8"
    if size == 0:
        return "the empty name is not an attribute name"
    if size > MAX_NAME_BYTES:
        return f"name of {size} bytes exceeds the limit of {MAX_NAME_BYTES} bytes"
    if "\0" in name:
        return "name contains a NUL byte"
    return ""


def read_name(value, path):
    name = read_string(value, path)
    problem = name_problem(name)
    if problem:
        fail(path, problem)
    return name
