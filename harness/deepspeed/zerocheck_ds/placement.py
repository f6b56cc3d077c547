"""Placement policies as scenarios (and configs' "zerocheck" section) write them.

{"kind": "none"}, {"kind": "attr_mod", "attr": NAME} (an expert's owner rank is its user
attribute NAME mod world_size) or {"kind": "map", "owners": {PATH: RANK}}. Torch-free.
"""

from dataclasses import dataclass, field

from .strict_json import fail, key_path, read_int, read_name, read_object, read_string, shown


@dataclass
class Placement:
    kind: str = "none"  # "none", "attr_mod" or "map"
    attr: str = ""
    owners: dict = field(default_factory=dict)  # map: module path -> rank


def read_placement(value, path, world_size):
    """Returns the policy at `path`. Raises ScenarioError naming the culprit's path."""
    if not isinstance(value, dict) or "kind" not in value:
        read_object(value, path, required=("kind",))
    kind_path = key_path(path, "kind")
    kind = read_string(value["kind"], kind_path)
    if kind == "none":
        read_object(value, path, required=("kind",))
        return Placement()
    if kind == "attr_mod":
        read_object(value, path, required=("kind", "attr"))
        return Placement(kind, attr=read_name(value["attr"], key_path(path, "attr")))
    if kind == "map":
        read_object(value, path, required=("kind", "owners"))
        raw_owners, owners_path = value["owners"], key_path(path, "owners")
        # Any path may be a key; only the values are constrained.
        read_object(raw_owners, owners_path,
                    optional=tuple(raw_owners) if isinstance(raw_owners, dict) else ())
        owners = {p: read_int(rank, key_path(owners_path, p), 0, world_size - 1)
                  for p, rank in raw_owners.items()}
        return Placement(kind, owners=owners)
    fail(kind_path, f"unknown placement kind {shown(kind)} (expected none, attr_mod or map)")
