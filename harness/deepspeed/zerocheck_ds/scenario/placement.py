"""Placement policies as scenarios (and configs' "zerocheck" section) write them.

The kinds and their keys are schema.PLACEMENT_KINDS (engine/placement.h): "none"; "attr_mod"
with "attr" (an expert's owner rank is its user attribute ATTR mod world_size); "map" with
"owners" ({PATH: RANK}, each rank in [0, world_size - 1]). Torch-free.
"""

from dataclasses import dataclass, field

from . import schema
from .strict_json import fail, key_path, read_enum, read_int, read_name, read_object, type_name


@dataclass
class Placement:
    kind: str = "none"  # a kind of schema.PLACEMENT_KINDS
    attr: str = ""
    owners: dict = field(default_factory=dict)  # map: module path -> rank


def read_placement(value, path, world_size):
    """Returns the policy at `path`. Raises ScenarioError naming the culprit's path."""
    if not isinstance(value, dict):
        fail(path, f"expected an object, got {type_name(value)}")
    if "kind" not in value:
        fail(key_path(path, "kind"), "missing required key")
    kind = read_enum(value["kind"], key_path(path, "kind"), tuple(schema.PLACEMENT_KINDS))
    read_object(value, path, required=("kind",) + schema.PLACEMENT_KINDS[kind])
    placement = Placement(kind)
    if "attr" in value:
        placement.attr = read_name(value["attr"], key_path(path, "attr"))
    if "owners" in value:
        owners_path = key_path(path, "owners")
        raw = value["owners"]
        if not isinstance(raw, dict):
            fail(owners_path, f"expected an object, got {type_name(raw)}")
        # Any module path may be a key; the ranks are what is constrained.
        placement.owners = {p: read_int(rank, key_path(owners_path, p), 0, world_size - 1)
                            for p, rank in raw.items()}
    return placement
