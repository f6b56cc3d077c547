"""What a corpus of scenario files covers of the scenario language, and what it misses.

The language is schema.json's (schema.py): its operations, each operation's keys, the config keys
(the top level, `zero_optimization`'s numbers, flags and offload device, `zerocheck`'s, the
precision keys), the invalid configs an initialize may be given, the node kinds and node keys,
the constructions, placement kinds, optimizers and initialize optimizers. An item is covered when
one scenario of the corpus holds it: an operation or node kind that occurs, an operation, node or
config key that a file writes (a default left out covers nothing: the point is a value the
replay was handed), a construction, placement, optimizer or config error the file picks (an
initialize's "same" optimizer and the "eager" construction also when left out, as they are then
what runs).

Computed from the files and the schema alone: nothing is replayed. The corpus names what it
leaves out on purpose (corpus.json's "coverage": "excluded", category -> item -> why no scenario
holds it; "not_run", category -> item -> what a held item is not run with and why: a value no
scenario can run, a check only an option makes); coverage() sets every other item it lacks apart
as missing, and an exclusion of an item it holds, a "not_run" of one it lacks, or either of no
item of the schema, as stale. `zerocheck-ds corpus --coverage` prints the listing (suite/console.py).

Torch-free, like the rest of scenario/.
"""

import json
import os
from dataclasses import dataclass, field

from . import schema
from .scenario import scenario_from_json
from .strict_json import ScenarioError, decode


def _config_keys():
    """The config keys as dotted paths, in the schema's table orders."""
    zero = "zero_optimization"
    return ((*(k.name for k in schema.CONFIG_TOP_KEYS),)
            + tuple(f"{zero}.{k.name}" for k in schema.CONFIG_ZERO_KEYS + schema.CONFIG_ZERO_FLAGS)
            + (f"{zero}.offload_optimizer.device",)
            + tuple(f"zerocheck.{k}" for k in schema.ZEROCHECK_SECTION_KEYS)
            + tuple(schema.precision_key_name(k) for k in schema.PRECISION_KEYS))


def _node_keys():
    keys = [k for row in schema.NODE_KINDS.values() for k in row.keys] + list(schema.NODE_OPTIONAL)
    return tuple(dict.fromkeys(keys))


# Category -> every item of the schema, in the schema's orders. The listing's order too.
CATEGORIES = {
    "operations": tuple(schema.OPS),
    "op_keys": tuple(f"{op}.{key}" for op, keys in schema.OPS.items()
                     for key in keys.required + keys.optional),
    "config_keys": _config_keys(),
    "config_errors": tuple(schema.CONFIG_ERRORS),
    "node_kinds": tuple(schema.NODE_KINDS),
    "node_keys": _node_keys(),
    "constructions": schema.CONSTRUCTIONS,
    "placement_kinds": tuple(schema.PLACEMENT_KINDS),
    "optimizers": tuple(schema.OPTIMIZERS),
    "initialize_optimizers": schema.INITIALIZE_OPTIMIZERS,
}


@dataclass
class Coverage:
    """One corpus against the schema. Category -> item -> ...:
    `covered`: the names of the scenarios that hold it; `values`: config key -> the values
    written (JSON text, sorted); `missing`: items neither covered nor excluded; `excluded`: the
    corpus's exclusions (item -> why) of items it does not hold; `stale`: exclusions of items it
    holds or that the schema does not have (item -> why stale); `not_run`: the corpus's notes
    (item -> what it is not run with) on items it holds."""

    scenarios: int = 0
    covered: dict = field(default_factory=dict)
    values: dict = field(default_factory=dict)
    missing: dict = field(default_factory=dict)
    excluded: dict = field(default_factory=dict)
    stale: dict = field(default_factory=dict)
    not_run: dict = field(default_factory=dict)

    def complete(self):
        """True when every item of the schema is covered or excluded, and no exclusion is stale."""
        return not any(self.missing.values()) and not any(self.stale.values())

    def to_json(self):
        return {"format": "zerocheck-corpus-coverage/1", "scenarios": self.scenarios,
                "complete": self.complete(),
                "categories": {
                    category: {"covered": {item: len(names) for item, names
                                           in self.covered[category].items()},
                               "missing": list(self.missing[category]),
                               "excluded": dict(self.excluded[category]),
                               "not_run": dict(self.not_run[category]),
                               "stale": dict(self.stale[category])}
                    for category in CATEGORIES},
                "config_values": self.values}


def _written_config_keys(config):
    """Yields (dotted key, value) for every key a scenario's config object writes."""
    for key, value in config.items():
        if key == "zero_optimization" and isinstance(value, dict):
            for zero_key, zero_value in value.items():
                if zero_key == "offload_optimizer" and isinstance(zero_value, dict):
                    for sub, sub_value in zero_value.items():
                        yield f"{key}.{zero_key}.{sub}", sub_value
                else:
                    yield f"{key}.{zero_key}", zero_value
        elif key in ("zerocheck", *schema.PRECISION_SECTIONS) and isinstance(value, dict):
            for sub, sub_value in value.items():
                yield f"{key}.{sub}", sub_value
        else:
            yield key, value


def items_of(doc, name="scenario"):
    """Returns (category -> set of items, config key -> set of JSON values) that the decoded
    scenario `doc` holds. Raises ScenarioError when `doc` is not a valid scenario."""
    scenario = scenario_from_json(doc, name)
    held = {category: set() for category in CATEGORIES}
    values = {}
    held["constructions"].add(scenario.construct)
    held["placement_kinds"].add(scenario.placement.kind)
    held["optimizers"].add(scenario.optimizer)
    for key, value in _written_config_keys(doc["config"]):
        held["config_keys"].add(key)
        values.setdefault(key, set()).add(json.dumps(value, sort_keys=True))
    for node in doc["tree"]:
        held["node_kinds"].add(node["kind"])
        held["node_keys"].update(k for k in node if k != "kind")
    for raw, op in zip(doc["ops"], scenario.ops):
        held["operations"].add(op.op)
        held["op_keys"].update(f"{op.op}.{key}" for key in raw if key != "op")
        if op.op == "initialize":
            held["initialize_optimizers"].add(op.optimizer)
            if op.config_error is not None:
                held["config_errors"].add(op.config_error)
    return held, values


def coverage(files, exclusions=None):
    """Returns the Coverage of the scenario files `files` (paths) against the schema, with the
    corpus's `exclusions` ({"excluded": {category: {item: why}}, "not_run": {category: {item: why}}},
    corpus.json's "coverage"). Raises ScenarioError naming the file of an invalid scenario, and
    ValueError for an exclusion of an unknown category."""
    exclusions = exclusions or {}
    excluded = exclusions.get("excluded", {})
    not_run = exclusions.get("not_run", {})
    unknown = sorted((set(excluded) | set(not_run)) - set(CATEGORIES))
    if unknown:
        raise ValueError(f"coverage exclusions of unknown categories {unknown}; "
                         f"the categories are {list(CATEGORIES)}")
    result = Coverage(scenarios=len(files))
    found = {category: {} for category in CATEGORIES}
    values = {}
    for path in files:
        name = os.path.basename(path)[:-len(".json")] if path.endswith(".json") else path
        with open(path, "rb") as f:
            try:
                held, written = items_of(decode(f.read()), name)
            except ScenarioError as e:
                raise ScenarioError(f"{path}: {e}") from None
        for category, items in held.items():
            for item in items:
                found[category].setdefault(item, []).append(name)
        for key, seen in written.items():
            values.setdefault(key, set()).update(seen)
    for category, every in CATEGORIES.items():
        reasons = excluded.get(category, {})
        result.covered[category] = {item: sorted(found[category][item])
                                    for item in every if item in found[category]}
        result.missing[category] = [item for item in every
                                    if item not in found[category] and item not in reasons]
        result.excluded[category] = {item: why for item, why in reasons.items()
                                     if item in every and item not in found[category]}
        result.stale[category] = {
            item: ("the corpus holds it" if item in found[category]
                   else f"not one of the schema's {category}")
            for item in reasons if item not in result.excluded[category]}
        notes = not_run.get(category, {})
        result.not_run[category] = {item: why for item, why in notes.items()
                                    if item in result.covered[category]}
        result.stale[category].update({
            f"{item} (not_run)": ("the corpus does not hold it" if item in every
                                  else f"not one of the schema's {category}")
            for item in notes if item not in result.not_run[category]})
    result.values = {key: sorted(values[key]) for key in CATEGORIES["config_keys"] if key in values}
    return result


def listing(result, width=100):
    """The text listing of a Coverage: per category what is covered (with how many scenarios
    hold it; config keys with the values written; what it is not run with), missing, excluded
    (why) and stale."""
    lines = [f"coverage of {result.scenarios} scenarios against the scenario schema "
             f"({schema.FORMAT}): {'complete' if result.complete() else 'GAPS'}"]
    for category, every in CATEGORIES.items():
        covered = result.covered[category]
        lines.append(f"{category}: {len(covered)} of {len(every)} covered")
        for item, names in covered.items():
            text = f"  covered   {item} ({len(names)})"
            if category == "config_keys":
                text += ": " + ", ".join(result.values[item])
            lines.append(text if len(text) <= width else text[:width - 3] + "...")
            if item in result.not_run[category]:
                lines.append(f"            not run: {result.not_run[category][item]}")
        lines += [f"  MISSING   {item}" for item in result.missing[category]]
        lines += [f"  excluded  {item}: {why}" for item, why in result.excluded[category].items()]
        lines += [f"  STALE     exclusion of {item}: {why}"
                  for item, why in result.stale[category].items()]
    return "\n".join(lines)
