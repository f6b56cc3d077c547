"""Strict JSON reading with JSON paths: the building blocks of the scenario and config readers.

Every problem raises ScenarioError "<path>: <message>" with the path and message the C++ reader
prints for the same input (the convention and the message catalogue: harness/SCENARIO_FORMAT.md;
both readers run the shared fixtures in harness/tests/scenarios/malformed/). Paths start at `$`:
`.key` for an identifier key, `["key"]` (JSON-escaped) for any other, `[i]` for an index.

Python's json module is more lenient than nlohmann's parser, which the C++ reader uses; decode()
closes the gaps: duplicate keys (refused in every object, at the repeated key), NaN/Infinity,
lone surrogates and invalid UTF-8 (malformed JSON), numbers beyond a double (malformed JSON, as
nlohmann's overflow error), integers outside [-2^63, 2^64-1] (a double, as nlohmann reads them).

Torch-free on purpose: a malformed file is rejected before torch is imported.
"""

import json
import math
import re

from . import schema

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class ScenarioError(Exception):
    """Malformed scenario or config input: "<JSON path>: <message>"."""


def fail(path, message):
    raise ScenarioError(f"{path}: {message}")


class _Pairs(dict):
    """A decoded JSON object that keeps its key/value pairs as written, repeats included."""

    pairs = ()


def _collect_pairs(pairs):
    obj = _Pairs(pairs)
    obj.pairs = pairs
    return obj


def _refuse_constant(name):
    # json.loads would turn NaN/Infinity into floats; they are not JSON.
    raise ValueError(f"{name} is not a JSON value")


def _parse_float(text):
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number overflow parsing {text[:40]!r}")
    return value


def _parse_int(text):
    # nlohmann keeps an integer that fits int64 or uint64 and reads any other as a double.
    if len(text) <= 21:
        value = int(text)
        if INT64_MIN <= value <= UINT64_MAX:
            return value
    return _parse_float(text)


def _walk(value, path):
    """Yields (path, value, key repeated?) for every value and object key in document order."""
    stack = [(path, value)]
    while stack:
        path, value = stack.pop()
        yield path, value, False
        if isinstance(value, dict):
            seen, children = set(), []
            for key, item in getattr(value, "pairs", value.items()):
                child = key_path(path, key)
                children.append((child, key, key in seen, item))
                seen.add(key)
            for child, key, repeated, item in reversed(children):
                stack.append((child, item))
                stack.append((child, _Key(key, repeated)))
        elif isinstance(value, list):
            stack.extend((index_path(path, i), item) for i, item in reversed(list(enumerate(value))))


class _Key(str):
    """An object key met by _walk (yielded just before its value)."""

    def __new__(cls, key, repeated):
        obj = super().__new__(cls, key)
        obj.repeated = repeated
        return obj


def decode(text):
    """Returns the JSON document in `text` (str or UTF-8 bytes).

    Raises ScenarioError at `$` when it is not JSON, or at the repeated key of any object that
    writes a key twice (checked before any other rule, like the C++ reader).
    """
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            fail("$", f"malformed JSON: invalid UTF-8 at byte {e.start}")
    try:
        doc = json.loads(text, object_pairs_hook=_collect_pairs, parse_constant=_refuse_constant,
                         parse_float=_parse_float, parse_int=_parse_int)
    except json.JSONDecodeError as e:
        fail("$", f"malformed JSON: line {e.lineno} column {e.colno}: {e.msg}")
    except RecursionError:
        fail("$", "malformed JSON: nested too deeply")
    except ValueError as e:
        fail("$", f"malformed JSON: {e}")
    walked = list(_walk(doc, "$"))
    # \ud800 escapes decode to lone surrogates in Python; nlohmann refuses them while parsing.
    for _, value, _ in walked:
        if isinstance(value, str) and not _is_utf8(value):
            fail("$", "malformed JSON: a string holds a lone surrogate")
    for path, value, _ in walked:
        if isinstance(value, _Key) and value.repeated:
            fail(path, "duplicate key")
    return doc


def _is_utf8(text):
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def key_path(path, key):
    """Returns the path of `key` inside the object at `path`."""
    if _IDENTIFIER.match(key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def index_path(path, index):
    return f"{path}[{index}]"


def type_name(value):
    """Returns the catalogue's name of a decoded JSON value's type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer" if INT64_MIN <= value <= UINT64_MAX else "number"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def quoted(text):
    """Returns `text` JSON-escaped, as messages show values."""
    return json.dumps(text, ensure_ascii=False)


def read_object(value, path, required=(), optional=()):
    """Returns the object at `path`. Raises on a non-object, an unknown key or a missing one.

    `required` then `optional` is the order the message lists the allowed keys in.
    """
    if not isinstance(value, dict):
        fail(path, f"expected an object, got {type_name(value)}")
    allowed = tuple(dict.fromkeys(tuple(required) + tuple(optional)))
    for key in value:
        if key not in allowed:
            fail(key_path(path, key), f"unknown key (expected one of: {', '.join(allowed) or 'none'})")
    for key in required:
        if key not in value:
            fail(key_path(path, key), "missing required key")
    return value


def read_int(value, path, lo=INT64_MIN, hi=INT64_MAX):
    # bool is an int subclass in Python; `true` for an integer is always a mistake.
    if type_name(value) != "integer":
        fail(path, f"expected an integer, got {type_name(value)}")
    if value < lo or value > hi:
        fail(path, f"value {value} is out of range [{lo}, {hi}]")
    return value


def read_limited(value, path, limit):
    """read_int within the schema limit named `limit`."""
    lo, hi = schema.LIMITS[limit]
    return read_int(value, path, lo, hi)


def read_number(value, path):
    if type_name(value) not in ("integer", "number"):
        fail(path, f"expected a number, got {type_name(value)}")
    return value


def read_bool(value, path):
    if type(value) is not bool:
        fail(path, f"expected a boolean, got {type_name(value)}")
    return value


def read_string(value, path):
    if not isinstance(value, str):
        fail(path, f"expected a string, got {type_name(value)}")
    return value


def read_enum(value, path, names):
    """Returns the string at `path` when it is one of `names` (listed in the message if not)."""
    text = read_string(value, path)
    if text not in names:
        fail(path, f"unknown value {quoted(text)} (expected one of: {', '.join(names)})")
    return text


def read_array(value, path, limit=None):
    """Returns the array at `path`; its length within the schema limit named `limit`, if any."""
    if not isinstance(value, list):
        fail(path, f"expected an array, got {type_name(value)}")
    if limit is not None:
        lo, hi = schema.LIMITS[limit]
        if len(value) > hi:
            fail(path, f"has {len(value)} items, expected at most {hi}")
        if len(value) < lo:
            fail(path, f"has {len(value)} items, expected at least {lo}")
    return value


def name_problem(name):
    """Returns why `name` is not an attribute name, or "" when it is one (AttrDict::name_problem)."""
    if not _is_utf8(name):
        return "name is not valid UTF-8"
    size = len(name.encode("utf-8"))
    if size == 0:
        return "the empty name is not an attribute name"
    if size > schema.ATTRIBUTE_NAME_MAX_BYTES:
        return f"name of {size} bytes exceeds the limit of {schema.ATTRIBUTE_NAME_MAX_BYTES}"
    if "\0" in name:
        return "name contains a NUL byte"
    return ""


def read_checked(value, path, problem_of):
    """Returns the string at `path` when problem_of(it) is "", else fails with that problem."""
    text = read_string(value, path)
    problem = problem_of(text)
    if problem:
        fail(path, problem)
    return text


def read_name(value, path):
    return read_checked(value, path, name_problem)
