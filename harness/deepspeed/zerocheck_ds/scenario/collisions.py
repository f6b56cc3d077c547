"""The name-collision rule: which user attribute names Python objects cannot hold plainly.

In LibTorch every name is free for the user's attribute dictionary; in Python a module or a
parameter already owns many names, and writing them changes what the object is (`forward = 3`
breaks the model, `weight = [1]` is a TypeError, `data` on a parameter swaps its storage). So:

    A user attribute NAME on a module or parameter is *not representable upstream* when, on the
    freshly built object (before any user write and before any engine touched it),
      - a class in the object's MRO defines NAME (methods, properties, descriptors:
        `forward`, `append`, `data`, `grad`, `T`, `__dict__`), or
      - NAME is an instance attribute the constructor set (`training`, `_parameters`,
        `in_features`, `normalized_shape`), or
      - NAME is a registered parameter, buffer or submodule (`weight`, `bias`, `linear`,
        `experts`, `0`).

Writes and deletes of such names are skipped and recorded in the verdict, never attempted, so
the runner cannot crash or corrupt the model. The rule reads the pristine object: names an
engine adds later (`ds_id`, `ds_status`, `id`) stay representable, which is the whole point.
"""


def _instance_names(obj):
    names = set(vars(obj))
    for registry in ("_parameters", "_buffers", "_modules"):
        names.update(getattr(obj, registry, {}) or {})
    return frozenset(names)


class PristineNames:
    """The names each module and parameter of a tree owned right after it was built."""

    def __init__(self, root):
        self._names = {}
        for module in root.modules():
            self._names[id(module)] = _instance_names(module)
        for param in root.parameters():
            self._names[id(param)] = _instance_names(param)

    def reason(self, obj, name):
        """Returns why `name` is not representable on `obj`, or None when it is."""
        for klass in type(obj).__mro__:
            if name in vars(klass):
                return f"{name!r} is defined by class {klass.__qualname__}"
        # An object the tree did not hold at build time: judge it as it is now.
        pristine = self._names.get(id(obj))
        if pristine is None:
            pristine = _instance_names(obj)
        if name not in pristine:
            return None
        if name in (getattr(obj, "_parameters", None) or {}):
            return f"{name!r} is a registered parameter"
        if name in (getattr(obj, "_buffers", None) or {}):
            return f"{name!r} is a registered buffer"
        if name in (getattr(obj, "_modules", None) or {}):
            return f"{name!r} is a registered submodule"
        return f"{name!r} is an instance attribute the constructor set"
