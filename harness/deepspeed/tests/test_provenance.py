"""provenance.py: the audit names the upstream code that wrote, deleted or raised, and only it."""

import importlib.util
import os
import tempfile
import textwrap
import unittest

from . import support  # noqa: F401 - puts the package on sys.path

import torch

from zerocheck_ds.engines.provenance import Audit, UpstreamFiles

UPSTREAM_CODE = textwrap.dedent("""\
    def clobber(module, param):
        helper(module)
        param.ds_id = 7
        del module.extra

    def helper(module):
        module.id = 99

    def fail():
        raise ValueError("upstream says no")

    def hook(module):
        return module.register_forward_pre_hook(lambda m, inputs: None)

    class Engine:
        def __getattr__(self, name):
            raise AttributeError(name)

        def prologue(self):
            return self.timers
    """)


class AuditTest(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.mkdtemp()
        package = os.path.join(self.folder, "fakeupstream")
        os.makedirs(package)
        path = os.path.join(package, "core.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(UPSTREAM_CODE)
        spec = importlib.util.spec_from_file_location("fakeupstream.core", path)
        self.upstream = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.upstream)
        self.audit = Audit(package)
        self.audit.install()
        self.addCleanup(self.audit.uninstall)
        self.model = torch.nn.Sequential(torch.nn.Linear(2, 2))
        self.audit.watch(self.model)

    def test_the_innermost_upstream_frame_is_named_for_writes_and_deletes(self):
        module, param = self.model[0], self.model[0].weight
        module.id, module.extra = 3, 1  # the user's writes: nobody upstream
        self.assertIsNone(self.audit.last(module, "id"))
        self.upstream.clobber(module, param)
        wrote = self.audit.last(module, "id")
        self.assertEqual((wrote.file, wrote.function, wrote.line, wrote.action),
                         (os.path.join("fakeupstream", "core.py"), "helper", 7, "wrote"))
        self.assertEqual(wrote.to_json()["code"], "module.id = 99")  # the line itself
        self.assertEqual(self.audit.last(param, "ds_id").function, "clobber")
        deleted = self.audit.last(module, "extra")
        self.assertEqual((deleted.function, deleted.line, deleted.action), ("clobber", 4, "deleted"))

    def test_objects_outside_the_watched_tree_are_not_recorded(self):
        other = torch.nn.Linear(2, 2)
        other.extra = 0
        self.upstream.clobber(other, other.weight)
        self.assertIsNone(self.audit.last(other, "id"))
        self.assertIsNone(self.audit.last(other.weight, "ds_id"))

    def test_a_write_around_setattr_is_not_seen(self):
        module = self.model[0]
        module.__dict__["id"] = 5
        self.assertIsNone(self.audit.last(module, "id"))

    def test_a_hook_registered_upstream_is_named_under_the_hook_dict(self):
        module = self.model[0]
        module.register_forward_pre_hook(lambda m, inputs: None)  # the user's: nobody upstream
        self.assertIsNone(self.audit.last(module, "_forward_pre_hooks"))
        self.upstream.hook(module)
        hooked = self.audit.last(module, "_forward_pre_hooks")
        self.assertEqual((hooked.function, hooked.line, hooked.action), ("hook", 13, "registered"))
        self.assertIsNone(self.audit.last(module, "_forward_hooks"))
        self.audit.uninstall()
        self.assertFalse(hasattr(torch.nn.Module.register_forward_pre_hook, "__wrapped__"))

    def test_an_attribute_error_of_getattr_is_its_readers(self):
        try:
            self.upstream.Engine().prologue()
        except AttributeError as e:
            origin = self.audit.files.raiser(e)
        self.assertEqual((origin.function, origin.line), ("prologue", 20))

    def test_uninstall_restores_the_classes(self):
        self.audit.uninstall()
        self.assertNotIn("__setattr__", torch.nn.Parameter.__dict__)
        self.assertFalse(hasattr(torch.nn.Module.__setattr__, "__wrapped__"))
        self.upstream.helper(self.model[0])
        self.assertIsNone(self.audit.last(self.model[0], "id"))

    def test_raiser_is_the_innermost_upstream_frame_of_the_traceback(self):
        try:
            self.upstream.fail()
        except ValueError as e:
            origin = UpstreamFiles(os.path.dirname(self.upstream.__file__)).raiser(e)
        self.assertEqual((origin.function, origin.line, origin.action), ("fail", 10, "raised"))
        try:
            raise KeyError("ours")
        except KeyError as e:
            self.assertIsNone(self.audit.files.raiser(e))


if __name__ == "__main__":
    unittest.main()
