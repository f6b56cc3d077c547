"""Checks a suite summary (summary.json, the --json document) against summary_schema.json.

A small validator of the JSON Schema keywords that file uses (type, required, properties, items,
enum, const, oneOf): the standard library has none, and no package is installed for it.
`python3 -m zerocheck_ds.findings.summary_schema FILE` exits 0 when FILE conforms, else 1 naming the path.
"""

import json
import os
import sys

SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "summary_schema.json")
_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None),
          "number": (int, float)}


def _is(value, name):
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number" and isinstance(value, bool):
        return False
    return isinstance(value, _TYPES[name])


def errors(value, schema=None, path="$"):
    """Every way `value` breaks `schema` (default: the summary's), as "PATH: what" lines."""
    if schema is None:
        with open(SCHEMA, encoding="utf-8") as f:
            schema = json.load(f)
    if "oneOf" in schema:
        tries = [errors(value, s, path) for s in schema["oneOf"]]
        if sum(not t for t in tries) == 1:
            return []
        return [f"{path}: matches {sum(not t for t in tries)} of the {len(tries)} alternatives"] + \
            [f"  alternative {i + 1}: {e}" for i, t in enumerate(tries) for e in t]
    found = []
    types = schema.get("type")
    if types is not None:
        names = types if isinstance(types, list) else [types]
        if not any(_is(value, n) for n in names):
            return [f"{path}: expected {' or '.join(names)}, got {type(value).__name__}"]
    if "const" in schema and value != schema["const"]:
        found.append(f"{path}: expected {schema['const']!r}, got {value!r}")
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, dict):
        found += [f"{path}: no {key!r}" for key in schema.get("required", ()) if key not in value]
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                found += errors(value[key], sub, f"{path}.{key}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            found += errors(item, schema["items"], f"{path}[{i}]")
    return found


def main(argv):
    if len(argv) != 1:
        print("usage: python3 -m zerocheck_ds.findings.summary_schema FILE", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        found = errors(json.load(f))
    for line in found:
        print(f"{argv[0]}: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
