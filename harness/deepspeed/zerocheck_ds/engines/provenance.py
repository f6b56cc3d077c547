"""Who did it: the upstream code that wrote an attribute on the user's objects, or that raised.

`Audit` wraps nn.Module.__setattr__/__delattr__ and Parameter.__setattr__/__delattr__ at class
level (a Parameter subclass would not survive DeepSpeed replacing data; the class methods do).
Every write or delete on an object of the user's tree (ids registered by `watch`; any other
object costs one set lookup) records the innermost frame inside the upstream package: its file
relative to the package's parent folder ("deepspeed/runtime/zero/parameter_offload.py"), its
function and line. A write by code outside the package (the user's own) records None, so the
last writer of a clobbered attribute is whoever clobbered it. `raiser` finds the innermost
upstream frame of an exception's traceback the same way; it needs no audit. A hook registered on a
watched module (nn.Module.register_*_hook, wrapped the same way) is recorded under the module's
hook dict ("_forward_pre_hooks", ...), the attribute the I5 fingerprint sees change: a failed
initialize that leaves its hooks on the model names the code that put them there.

What the audit cannot see: writes that bypass __setattr__ (`obj.__dict__[name] = v`,
`object.__setattr__`); those findings carry no origin and say so.
"""

import linecache
import os
import sys
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Origin:
    file: str  # relative to the upstream package's parent: "deepspeed/runtime/engine.py"
    function: str
    line: int
    action: str = "wrote"  # "wrote", "deleted", "registered" (a hook) or "raised"
    path: str = field(default="", compare=False)  # the file as imported, for its source line

    def describe(self):
        return f"{self.file}:{self.line} in {self.function}"

    def to_json(self):
        """With the source line itself, read only now (a finding), never while auditing."""
        return {"file": self.file, "function": self.function, "line": self.line,
                "action": self.action, "code": linecache.getline(self.path, self.line).strip()}


def _package_depth(path):
    """How many package folders (holding an __init__.py) hold the file `path`, innermost out."""
    depth, folder = 0, os.path.dirname(path)
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        depth, folder = depth + 1, os.path.dirname(folder)
    return max(depth, 1)


class UpstreamFiles:
    """Tells whether a code object's file is inside the upstream package; caches per file."""

    def __init__(self, package):
        # `package`: the package's folder (every file under it) or one file (a test adapter).
        self._package = os.path.abspath(package)
        self._real = os.path.realpath(self._package)
        # Names start at the package ("deepspeed/...", or for a file at the outermost package
        # holding it: "zerocheck_ds/engines/adapters.py").
        self._levels = 1 if os.path.isdir(self._package) else 1 + _package_depth(self._package)
        self._cache = {}

    def relative(self, filename):
        """The file's name relative to the package's parent, or None when it is not upstream."""
        try:
            return self._cache[filename]
        except KeyError:
            pass
        name = None
        path = os.path.abspath(filename)
        for package in (self._package, self._real):
            if path == package or path.startswith(package + os.sep):
                base = package
                for _ in range(self._levels):
                    base = os.path.dirname(base)
                name = os.path.relpath(path, base)
                break
        self._cache[filename] = name
        return name

    def innermost_frame(self, frame, action):
        """The first upstream frame walking outwards from `frame`, as an Origin, or None."""
        while frame is not None:
            name = self.relative(frame.f_code.co_filename)
            if name is not None:
                return Origin(name, frame.f_code.co_name, frame.f_lineno, action,
                              frame.f_code.co_filename)
            frame = frame.f_back
        return None

    def raiser(self, exception):
        """The innermost upstream frame of the exception's traceback, or None. An AttributeError
        raised by a `__getattr__` is the reader's: the frame that read the missing attribute
        (DeepSpeedEngine.__getattr__ raises for every name; who asked for it is the cause)."""
        found = None
        tb = getattr(exception, "__traceback__", None)
        while tb is not None:
            name = self.relative(tb.tb_frame.f_code.co_filename)
            if name is not None and not (isinstance(exception, AttributeError) and found
                                         and tb.tb_frame.f_code.co_name == "__getattr__"):
                found = Origin(name, tb.tb_frame.f_code.co_name, tb.tb_lineno, "raised",
                               tb.tb_frame.f_code.co_filename)
            tb = tb.tb_next
        return found


# nn.Module's hook registrations, and the dicts each adds to (torch 2's `with_kwargs` hooks go into
# a second dict as well).
_HOOK_DICTS = {
    "register_forward_pre_hook": ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs"),
    "register_forward_hook": ("_forward_hooks", "_forward_hooks_with_kwargs"),
    "register_full_backward_hook": ("_backward_hooks",),
    "register_backward_hook": ("_backward_hooks",),
    "register_full_backward_pre_hook": ("_backward_pre_hooks",),
}


class Audit:
    """The class-level audit of attribute writes on the user's objects. One per process: `install`
    once, `watch(root)` per replay, `last(obj, name)` for a finding's writer."""

    def __init__(self, package):
        self.files = UpstreamFiles(package)
        self._watched = set()
        self._last = {}  # (id(obj), name) -> Origin or None
        self._installed = []

    def install(self):
        import torch

        for cls in (torch.nn.Module, torch.nn.Parameter):
            for method, action in (("__setattr__", "wrote"), ("__delattr__", "deleted")):
                # The class's own method, if any, is put back by uninstall; else the inherited one
                # shows through again.
                self._installed.append((cls, method, cls.__dict__.get(method)))
                setattr(cls, method, self._wrap(getattr(cls, method), action))
        for method, dicts in _HOOK_DICTS.items():
            if hasattr(torch.nn.Module, method):  # torch 1.13 lacks the backward pre-hook
                self._installed.append((torch.nn.Module, method,
                                        torch.nn.Module.__dict__.get(method)))
                setattr(torch.nn.Module, method,
                        self._wrap_hook(getattr(torch.nn.Module, method), dicts))

    def uninstall(self):
        for cls, method, own in reversed(self._installed):
            if own is None:
                delattr(cls, method)
            else:
                setattr(cls, method, own)
        self._installed.clear()

    def _wrap(self, original, action):
        watched, last, files = self._watched, self._last, self.files

        def audited(obj, name, *value):
            original(obj, name, *value)
            if id(obj) in watched:
                last[(id(obj), name)] = files.innermost_frame(sys._getframe(1), action)
        audited.__wrapped__ = original
        return audited

    def _wrap_hook(self, original, dicts):
        watched, last, files = self._watched, self._last, self.files

        def audited(module, *args, **kwargs):
            handle = original(module, *args, **kwargs)
            if id(module) in watched:
                origin = files.innermost_frame(sys._getframe(1), "registered")
                for name in dicts:
                    last[(id(module), name)] = origin
            return handle
        audited.__wrapped__ = original
        return audited

    def watch(self, root):
        """Audits the modules and parameters of `root` (and forgets the previous tree's)."""
        self._watched.clear()
        self._last.clear()
        for module in root.modules():
            self._watched.add(id(module))
            for param in module.parameters(recurse=False):
                self._watched.add(id(param))

    def watch_also(self, obj):
        """Audits `obj` too (an engine: who writes its step counters) until the next `watch`."""
        self._watched.add(id(obj))

    def last(self, obj, name):
        """The Origin of the last write or delete of `name` on `obj`, or None (the user's, or
        one the audit did not see)."""
        return self._last.get((id(obj), name))
