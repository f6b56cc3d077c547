"""The user's side of attributes: performs the user's writes and remembers the last one.

Entries are keyed by the object's canonical place (module path, local parameter name or ""), so
a tied module, or a parameter reached through an Expert and through its Linear, is one entry.
Each tracked name expects a literal, or ABSENT once the user deleted it (an engine writing it
back is then a finding). Names the user never touched are not tracked: engines may add their
own. Writes of names the collision rule refuses are skipped, never attempted.
"""

from dataclasses import dataclass

from ..model import values
from ..scenario.collisions import PristineNames
from ..scenario.strict_json import index_path, key_path


class WriteSkipped(Exception):
    """The write has nothing to act on or cannot be represented; the message says why."""


@dataclass(frozen=True)
class ObjectKey:
    module: str  # canonical module path, "" for the root
    param: str  # local parameter name, "" for the module itself

    def describe(self):
        where = f"module {self.module!r}"
        return f"{where} parameter {self.param!r}" if self.param else where


class AttributeLedger:
    def __init__(self, built):
        self.built = built
        self._rule = PristineNames(built.root)  # must run before any user write
        self._expected = {}  # ObjectKey -> {name: literal or ABSENT}, in write order

    def resolve(self, module_path, param=""):
        """Returns (object, canonical key) for a module path and optional local parameter name.

        Raises WriteSkipped when the path or the parameter does not exist.
        """
        try:
            module = self.built.root.get_submodule(module_path)
        except Exception:  # AttributeError for a missing path; anything else is the same to us
            raise WriteSkipped(f"no module at path {module_path!r}") from None
        if not param:
            path = self.built.path_of(module)
            return module, ObjectKey(path if path is not None else module_path, "")
        try:
            obj = module.get_parameter(param)
        except AttributeError:  # torch's: no such parameter (hasattr swallows the others' too)
            raise WriteSkipped(f"module {module_path!r} has no parameter {param!r}") from None
        except Exception as e:  # reading it ran an engine's code, which raised: the cause, kept
            raise WriteSkipped(f"reading module {module_path!r} parameter {param!r} raised "
                               f"{type(e).__name__}: {e}") from e
        found = self.built.param_key(obj)
        return obj, ObjectKey(*found) if found else ObjectKey(module_path, param)

    def write(self, module_path, param, name, literal):
        """The user's `obj.name = value`. Raises WriteSkipped; other exceptions propagate."""
        obj, key = self.resolve(module_path, param)
        self._write(obj, key, name, literal)

    def delete(self, module_path, param, name):
        """The user's `del obj.name`. Raises WriteSkipped when there is nothing to delete."""
        obj, key = self.resolve(module_path, param)
        self._refuse_collision(obj, key, name)
        try:
            delattr(obj, name)
        except AttributeError:
            raise WriteSkipped(f"{key.describe()} has no attribute {name!r} to delete") from None
        self._expected.setdefault(key, {})[name] = values.ABSENT

    def apply_tree(self, scenario):
        """Writes the attributes the scenario's nodes carry. Returns [(what, reason)] skipped."""
        skipped = []
        for index in sorted(self.built.nodes):
            node, module = scenario.tree[index], self.built.nodes[index]
            key = ObjectKey(self.built.path_of(module), "")
            for j, entry in enumerate(node.attrs):
                what = f"{index_path(key_path(index_path('$.tree', index), 'attrs'), j)} {entry.name!r}"
                self._try_write(module, key, entry, what, skipped)
            for pname, entries in node.param_attrs.items():
                param = module.get_parameter(pname)
                pkey = ObjectKey(*self.built.param_key(param))
                for j, entry in enumerate(entries):
                    what = (f"{index_path(key_path(key_path(index_path('$.tree', index), 'param_attrs'), pname), j)} "
                            f"{entry.name!r}")
                    self._try_write(param, pkey, entry, what, skipped)
        for index in self.built.unreachable:
            skipped.append((index_path("$.tree", index), "no parent lists this node; it is not in the model"))
        return skipped

    def expectations(self):
        """Yields (key, name, expected literal or ABSENT) for every tracked attribute."""
        for key, names in self._expected.items():
            for name, expected in names.items():
                yield key, name, expected

    def expected(self, key, name, default=None):
        return self._expected.get(key, {}).get(name, default)

    def lookup(self, key):
        """Returns the live object at a canonical key (raises WriteSkipped when it is gone)."""
        return self.resolve(key.module, key.param)[0]

    def _try_write(self, obj, key, entry, what, skipped):
        try:
            self._write(obj, key, entry.name, entry.value)
        except WriteSkipped as e:
            skipped.append((what, str(e)))

    def _write(self, obj, key, name, literal):
        self._refuse_collision(obj, key, name)
        setattr(obj, name, values.to_live(literal))
        self._expected.setdefault(key, {})[name] = literal

    def _refuse_collision(self, obj, key, name):
        reason = self._rule.reason(obj, name)
        if reason:
            raise WriteSkipped(f"not representable upstream: on {key.describe()}, {reason}")
