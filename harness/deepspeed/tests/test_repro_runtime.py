"""repro_runtime: the functions repro scripts copy, tested here where they live, and the copier
that gives a script only what it uses."""

import io
import contextlib
import os
import unittest

import torch

from zerocheck_ds.repro import repro_runtime as rt
from zerocheck_ds.model import seeded, tree, twin
from zerocheck_ds.scenario.scenario import load_scenario

from . import support  # noqa: F401 - puts the package on sys.path
from zerocheck_ds.repro.repro_script import code_lines


class Values(unittest.TestCase):
    def test_same_is_type_strict(self):
        self.assertTrue(rt.same(1, 1))
        self.assertFalse(rt.same(1, 1.0))
        self.assertFalse(rt.same(1, True))
        self.assertTrue(rt.same(rt.ABSENT, rt.ABSENT))
        self.assertFalse(rt.same(None, rt.ABSENT))
        self.assertTrue(rt.same([1, "a"], [1, "a"]))
        self.assertFalse(rt.same([1], (1,)))
        t = torch.tensor([1.0, 2.0])
        self.assertTrue(rt.same(t, t.clone()))
        self.assertFalse(rt.same(t, t.double()))
        self.assertFalse(rt.same(t, torch.nn.Parameter(t.clone())))

    def test_show_is_one_line_and_never_reads_a_large_tensor(self):
        self.assertEqual(rt.show(torch.tensor([1.0])), "tensor([1.0], dtype=torch.float32)")
        self.assertEqual(rt.show(torch.zeros(100)),
                         "Tensor(shape=[100], dtype=torch.float32, device=cpu)")
        self.assertEqual(len(rt.show("x" * 500)), 203)

        class Broken:
            def __repr__(self):
                raise ValueError

        self.assertEqual(rt.show(Broken()), "<repr failed: ValueError>")
        with self.assertRaises(ValueError):  # the plain form leaves that to the checks' try
            rt.show_plain(Broken())


class Checks(unittest.TestCase):
    def setUp(self):
        rt.failures.clear()
        rt._reported.clear()
        rt.model = torch.nn.Sequential(torch.nn.Linear(2, 2))
        rt.user_attrs = {("0", "", "id"): 5}
        self.addCleanup(setattr, rt, "user_attrs", {})

    def run_check(self, check):
        with contextlib.redirect_stdout(io.StringIO()) as out:
            check(3)
        return out.getvalue()

    def test_an_attribute_overwritten_is_an_I1_failure_once(self):
        rt.model[0].id = 5
        self.assertEqual(self.run_check(rt.check_user_attrs), "")
        rt.model[0].id = 7
        self.assertIn("FAILED I1 at op 3: module '0' attribute 'id': expected 5, got 7",
                      self.run_check(rt.check_user_attrs))
        self.assertEqual(self.run_check(rt.check_user_attrs), "")  # reported once
        self.assertEqual(rt.failures, [("I1", "id", "5", "7",
                                        "op 3: module '0' attribute 'id': expected 5, got 7")])

    def test_the_once_form_reports_every_time_for_scripts_whose_checks_run_once(self):
        rt.model[0].id = 7
        self.addCleanup(setattr, rt, "fail", rt.fail)
        rt.fail = rt.record_failure  # what a one-operation script holds (repro_runtime.ONCE_FORMS)
        self.run_check(rt.check_user_attrs)
        self.run_check(rt.check_user_attrs)
        self.assertEqual(len(rt.failures), 2)

    def test_a_failure_without_an_identity_is_reported_every_time(self):
        with contextlib.redirect_stdout(io.StringIO()):
            for _ in range(2):
                rt.fail("op", 3, None, "no exception", "KeyError", "step raised KeyError")
        self.assertEqual(len(rt.failures), 2)

    def test_a_read_that_raises_is_a_failure_with_the_error(self):
        class Raising(torch.nn.Linear):
            @property
            def id(self):
                raise RuntimeError("partitioned")

        rt.model = torch.nn.Sequential(Raising(2, 2))
        self.assertIn("expected 5, got <reading it raised RuntimeError: partitioned>",
                      self.run_check(rt.check_user_attrs))

    def test_owner_by_attr_follows_the_users_value(self):
        rt.model[0].id = 5
        rt.placed, rt.PLACEMENT_ATTR, rt.SCENARIO_WORLD_SIZE = {"0": rt.model[0]}, "id", 2
        self.addCleanup(setattr, rt, "placed", {})
        self.assertEqual(self.run_check(rt.check_owner_by_attr), "")
        rt.model[0].id = 6
        self.assertIn("owner rank 1 (user's id=5) became 0", self.run_check(rt.check_owner_by_attr))
        rt.model[0] = torch.nn.Linear(2, 2)  # the same path, another module
        self.assertIn("owner rank 1 (user's id=5) became None (the user's module at this path was "
                      "replaced by a Linear)", self.run_check(rt.check_owner_by_attr))


class Verdict(unittest.TestCase):
    def setUp(self):
        rt.failures.clear()
        rt._reported.clear()
        with contextlib.redirect_stdout(io.StringIO()):
            rt.fail("op", 1, None, "no exception", "KeyError", "step raised KeyError: 'x'")
            rt.fail("I1", 2, "id", "5", "1", "module '0' attribute 'id': expected 5, got 1")

    def verdict(self, *target, **fields):
        with contextlib.redirect_stdout(io.StringIO()) as out, self.assertRaises(SystemExit) as e:
            rt.verdict("sig", *target, **fields)
        return e.exception.code, out.getvalue()

    def test_the_first_failure_like_the_target_is_reproduced_with_exit_1(self):
        self.assertEqual(self.verdict("I1", attribute="id"), (1, "REPRODUCED sig: expected 5, got "
                         "1 (op 2: module '0' attribute 'id': expected 5, got 1)\n"))
        self.assertEqual(self.verdict("op", actual="KeyError")[0], 1)

    def test_anything_else_is_not_reproduced_with_exit_0(self):
        for target, fields in ((("I1",), {"attribute": "ds_id"}), (("op",), {"actual": "Error"}),
                               (("I2",), {}), (("I1",), {"expected_start": "6"})):
            self.assertEqual(self.verdict(*target, **fields), (0, "NOT REPRODUCED sig\n"))


class Stand_ins(unittest.TestCase):
    def test_plain_forms_hold_the_rules_for_values_without_tensors_or_lists(self):
        self.assertFalse(rt.same_plain(1, True))
        self.assertFalse(rt.same_plain(None, rt.ABSENT))
        self.assertTrue(rt.same_plain("a", "a"))
        self.assertEqual(rt.show_plain(torch.zeros(2)),
                         "Tensor(shape=[2], dtype=torch.float32, device=cpu)")
        self.assertEqual(rt.show_plain(rt.ABSENT), "<absent>")

    def test_the_plain_engine_is_the_model(self):
        module = torch.nn.Linear(2, 2)
        rt.PLAIN = True
        self.addCleanup(setattr, rt, "PLAIN", False)
        self.assertEqual(rt.initialize(module, "opt", {}), (module, "opt", None, None))


class SeededValues(unittest.TestCase):
    """The compact element-by-element form a script carries gives seeded.py's bits."""

    def test_streams_equal_seeded_py_bit_for_bit(self):
        for seed, tag, stream, key, shape, bound in (
                (3, 2, "input", 5 * 256 + 1, (2, 4), 1.0),
                (7, 1, "parameter", seeded.parameter_key("0.linear.weight"), (4, 4),
                 seeded.parameter_bound(4)),
                (2**64 - 1, 3, "target", 0, (3,), 1.0), (0, 1, "parameter", 9, (0,), 1.0)):
            with self.subTest(seed=seed, stream=stream, shape=shape):
                expected = seeded.seeded_tensor(shape, seeded.stream_base(seed, stream, key), bound)
                self.assertTrue(torch.equal(rt.seeded_tensor(seed, tag, key, shape, bound),
                                            expected))

    def test_parameters_and_micro_batches_equal_seeded_py(self):
        def model():
            shared = torch.nn.Linear(4, 4, bias=False)
            return torch.nn.Sequential(shared, torch.nn.LayerNorm(4), shared, torch.nn.Linear(4, 4))

        ours, theirs = model(), model()
        rt.fill_parameters(ours, 11)
        seeded.fill_parameters(theirs, 11)
        for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
            self.assertTrue(torch.equal(a, b), name)
        rt.SEED, rt.RANK, rt.BATCH, rt.FEATURES = 5, 1, 2, 4
        self.addCleanup(setattr, rt, "RANK", 0)
        for a, b in zip(rt.micro_batch(3), seeded.micro_batch(5, 3, 1, 2, 4)):
            self.assertTrue(torch.equal(a, b))


class PlainTraining(unittest.TestCase):
    def test_the_plain_engine_trains_the_users_model_with_the_users_optimizer(self):
        module = torch.nn.Linear(2, 2)
        optimizer = torch.optim.SGD(module.parameters(), lr=0.5)
        rt.PLAIN = True
        self.addCleanup(setattr, rt, "PLAIN", False)
        engine, returned, _, _ = rt.initialize(module, optimizer, {}, rt.PlainEngine)
        self.assertIs(returned, optimizer)
        before = module.weight.detach().clone()
        engine.backward(engine(torch.ones(1, 2).to(engine.device)).sum())
        engine.step()
        self.assertFalse(torch.equal(before, module.weight))
        engine.zero_grad()
        self.assertTrue(module.weight.grad is None or not module.weight.grad.any())


def repro_twin_script(path, op_index):
    """The dense-twin script of an I3 finding at `op_index` of the scenario file `path`."""
    from zerocheck_ds.repro.repro_script import repro_script_text
    target = {"signature": "I3 step: value differs from the dense twin", "invariant": "I3",
              "op_index": op_index, "op": "step"}
    return repro_script_text(path, target)


class TwinOfAScript(unittest.TestCase):
    """rt.Twin is twin.DenseTwin where a script uses it (gradient_accumulation_steps 1, one engine
    over the root): the same values bit for bit, under DeepSpeed's rules and plain PyTorch's."""

    OPS = [("forward", [0]), ("backward",), ("step",), ("zero_grad",), ("forward", [1]),
           ("backward",), ("zero_grad",), ("step",), ("forward", [1]), ("backward",),
           ("forward", [0]), ("backward",), ("step",)]

    def setUp(self):
        path = os.path.join(os.path.dirname(support.PACKAGE_ROOT), "tests", "scenarios", "upstream_bugs",
                            "expert_skipped_by_route.json")
        self.path, self.scenario = path, load_scenario(path)
        rt.SEED, rt.BATCH, rt.FEATURES = self.scenario.seed, self.scenario.batch, self.scenario.features
        rt.WORLD_SIZE, rt.RANK, rt.RouteCursor = 2, 1, tree.RouteCursor
        self.addCleanup(setattr, rt, "WORLD_SIZE", 1)
        self.addCleanup(setattr, rt, "RANK", 0)

    def model(self):
        module = tree.build_tree(self.scenario).root
        rt.fill_parameters(module, self.scenario.seed)
        return module

    def run_both(self, deepspeed, training):
        """Each of OPS on rt.Twin and twin.DenseTwin, their values equal after every one; returns
        the script twin's module."""
        ours = self.model()
        ours_twin = rt.Twin(ours, torch.optim.Adam(rt.trainable(ours), lr=0.01), deepspeed)
        dense = twin.DenseTwin(self.model(), 2, training, 1,
                               lambda params: torch.optim.Adam(params, lr=0.01), tree.run_module)
        dense.start("")
        for i, (op, *route) in enumerate(self.OPS):
            if op == "forward":
                loss = ours_twin.forward(i, route[0])
                losses = dense.forward([rt.micro_batch(i, r) for r in range(2)],
                                       lambda: tree.RouteCursor(route[0]))
                self.assertEqual(loss, losses[1])
            else:
                getattr(ours_twin, op)()
                getattr(dense, op)()
            for name, value in dense.values().items():
                self.assertTrue(torch.equal(dict(ours.named_parameters())[name], value),
                                (deepspeed, i, op, name))
        return ours

    def test_equals_the_dense_twin_bit_for_bit(self):
        for deepspeed, training in ((True, twin.deepspeed_training(3, "loss")), (False, twin.TORCH)):
            with self.subTest(deepspeed=deepspeed):
                self.run_both(deepspeed, training)

    def test_with_clipping_equals_the_dense_twin_that_clips(self):
        # CONFIG's gradient_clipping binds at every step here: the script twin clips as the
        # replay's twin does, and not as the unclipped one.
        unclipped = self.run_both(True, twin.deepspeed_training(3, "loss"))
        rt.CONFIG = {"gradient_clipping": 1e-3}
        self.addCleanup(setattr, rt, "CONFIG", {})
        clipped = self.run_both(True, twin.deepspeed_training(3, "loss", gradient_clipping=1e-3))
        self.assertFalse(all(torch.equal(p, q) for p, q in zip(clipped.parameters(),
                                                               unclipped.parameters())))

    def test_the_plain_data_parallel_engine_clips_as_configured(self):
        # --plain's correct engine clips like the twin, so a clipped scenario's control holds.
        rt.WORLD_SIZE = 1
        rt.CONFIG = {"gradient_clipping": 1e-3}
        self.addCleanup(setattr, rt, "CONFIG", {})
        module = torch.nn.Linear(2, 1, bias=False)
        with torch.no_grad():
            module.weight.copy_(torch.tensor([[0.5, -0.25]]))
        engine = rt.DataParallelEngine(module, torch.optim.SGD(module.parameters(), lr=1.0))
        engine.backward(engine(torch.tensor([[3.0, 4.0]])).sum())  # gradient [3, 4], norm 5
        engine.step()
        coefficient = 1.0 / (((5.0 + 1e-6) / 1e-3))
        expected = torch.tensor([[0.5, -0.25]]) - torch.tensor([[3.0, 4.0]]) * coefficient
        self.assertTrue(torch.equal(module.weight.detach(), expected), module.weight)

    def test_the_twin_computes_where_its_module_is_and_compares_on_the_cpu(self):
        # A script puts the twin on the engine's device (an accelerator's bits are not the
        # CPU's); the micro-batches follow it, and gathered values (on the CPU) are compared
        # with the twin's brought to the CPU. "meta" stands in for an accelerator here.
        module = self.model().to("meta")
        self.assertEqual(rt.Twin(module, None, True).device, torch.device("meta"))
        self.assertEqual(rt.Twin(self.model(), None, True).device, torch.device("cpu"))
        script = repro_twin_script(self.path, op_index=3)
        self.assertLess(script.index("twin_model.to(engine.device)"),
                        script.index("twin = Twin(twin_model"))

    def test_a_load_gives_back_the_save_and_keeps_the_optimizer_where_asked(self):
        module = self.model()
        optimizer = torch.optim.Adam(rt.trainable(module), lr=0.01)
        ours = rt.Twin(module, optimizer, True)
        for i, op in ((1, "forward"), (2, "backward"), (3, "step")):
            ours.forward(i, [0]) if op == "forward" else getattr(ours, op)()
        saved = rt.snapshot(module, optimizer)
        for i, op in ((4, "forward"), (5, "backward"), (6, "step")):
            ours.forward(i, [1]) if op == "forward" else getattr(ours, op)()
        moments = {k: v["exp_avg"].clone() for k, v in optimizer.state_dict()["state"].items()}
        ours.load(saved, optimizer_states=False)
        for name, p in module.named_parameters():
            self.assertTrue(torch.equal(p, saved[0][name]), name)
        for k, v in optimizer.state_dict()["state"].items():
            self.assertTrue(torch.equal(v["exp_avg"], moments[k]))  # not the save's
        ours.load(saved)
        for k, v in optimizer.state_dict()["state"].items():
            self.assertTrue(torch.equal(v["exp_avg"], saved[1]["state"][k]["exp_avg"]))

    def test_a_difference_is_an_I3_failure_naming_the_parameter_once(self):
        rt.failures.clear()
        rt.model, rt.PLAIN = self.model(), True
        self.addCleanup(setattr, rt, "PLAIN", False)
        rt.twin = rt.Twin(self.model(), None, True)
        with contextlib.redirect_stdout(io.StringIO()):
            rt.check_twin(3)
            with torch.no_grad():
                next(rt.model.parameters()).view(-1)[0] += 1
            rt.check_twin(3)
            rt.check_twin(4)  # still differs: reported once
            rt.check_loss(5, 0.5, 0.25)
            rt.check_twin(6, "I6", {"the value of the save of op 2": dict(rt.model.named_parameters())})
        self.assertEqual([(f[0], f[1]) for f in rt.failures],
                         [("I3", "value"), ("I3", "loss"), ("I6", "value")])
        self.assertTrue(rt.failures[2][4].endswith("; it is the value of the save of op 2"),
                        rt.failures[2][4])
        first = next(name for name, _ in rt.model.named_parameters())
        self.assertIn(f"op 3: parameter {first!r} differs from the dense twin's", rt.failures[0][4])


class RepeatedInitialize(unittest.TestCase):
    """I5 as a script checks it, against stand-ins for what DeepSpeed may do on a repeat."""

    def setUp(self):
        rt.failures.clear()
        rt.model = torch.nn.Linear(4, 4)
        self.optimizer = torch.optim.SGD(rt.model.parameters(), lr=0.1)
        self.engine = rt.PlainEngine(rt.model, self.optimizer)
        rt.SEED, rt.BATCH, rt.FEATURES = 1, 2, 4

    def repeat(self, again, plain=False):
        rt.PLAIN = plain
        self.addCleanup(setattr, rt, "PLAIN", False)
        with contextlib.redirect_stdout(io.StringIO()):
            rt.repeat_initialize(1, "managed", [self.optimizer], again, self.engine)
        return [(f[2], f[3]) for f in rt.failures]

    def refuse(self, error):
        def again():
            raise error
        return again

    def test_a_refusal_that_changes_nothing_holds(self):
        refusal = ValueError("model has already been initialized")
        self.assertEqual(self.repeat(self.refuse(refusal)), [])
        self.assertEqual(self.repeat(self.refuse(KeyError("x")), plain=True), [])  # not called

    def test_an_accepted_repeat_or_another_error_is_a_finding(self):
        self.assertEqual(self.repeat(lambda: None), [("refused", "accepted")])
        rt.failures.clear()
        self.assertEqual(self.repeat(self.refuse(IndexError("list index out of range"))),
                         [("an error saying 'already been initialized'", "IndexError")])

    def test_a_change_or_a_broken_forward_is_a_finding(self):
        def changes():
            rt.model.ds_id = 3
            raise RuntimeError("already initialized")
        self.assertEqual(self.repeat(changes), [("nothing changed", "1 change(s)")])
        rt.failures.clear()

        def breaks():
            rt.model.forward = None
            raise RuntimeError("already initialized")
        found = self.repeat(breaks)
        self.assertIn(("forward runs", "raised"), found)


class InvalidConfigInitialize(unittest.TestCase):
    """I5 for an initialize given an invalid config, judged as the replay's lifecycle judges it:
    refused as a configuration error (deepspeed_adapter's rule, by the classes' names), nothing
    changed, the probe's forward still runs; under --plain not called."""

    def setUp(self):
        rt.failures.clear()
        rt.model = torch.nn.Linear(4, 4)
        rt.SEED, rt.BATCH, rt.FEATURES = 1, 2, 4

    def attempt(self, call, plain=False):
        rt.PLAIN = plain
        self.addCleanup(setattr, rt, "PLAIN", False)
        with contextlib.redirect_stdout(io.StringIO()):
            rt.invalid_initialize(0, "zero_stage", [None], call, rt.model)
        return [(f[1], f[2], f[3]) for f in rt.failures]

    def raises(self, error):
        def call():
            raise error
        return call

    def test_a_configuration_error_that_changes_nothing_is_no_finding(self):
        validation = type("ValidationError", (ValueError,), {"__module__": "pydantic.main"})
        for error in (AssertionError("batch"), validation("stage"),
                      type("DeepSpeedConfigError", (Exception,), {})("x"),
                      type("ZeRORuntimeException", (Exception,), {})("offload")):
            with self.subTest(type(error).__name__):
                self.assertTrue(rt.is_config_error(error))
                self.assertEqual(self.attempt(self.raises(error)), [])
        self.assertFalse(rt.is_config_error(type("ValidationError", (ValueError,), {})("x")))
        self.assertEqual(self.attempt(self.raises(KeyError("x")), plain=True), [])

    def test_accepted_another_error_or_a_change_is_a_finding(self):
        self.assertEqual(self.attempt(lambda: None), [("invalid config", "refused", "accepted")])
        rt.failures.clear()
        self.assertEqual(self.attempt(self.raises(KeyError("x"))),
                         [("invalid config", "a configuration error", "KeyError")])
        rt.failures.clear()

        def hooks_left():
            rt.model.register_forward_pre_hook(lambda module, inputs: None)
            raise AssertionError("refused, but late")
        self.assertEqual(self.attempt(hooks_left),
                         [("invalid config", "nothing changed", "1 change(s)")])
        self.assertIn("_forward_pre_hooks", rt.failures[0][4])


class RepeatedInitializeUnjudged(unittest.TestCase):
    """A repeat where the finding is another invariant's: run as the replay runs it (the repeat,
    then the probe's forward), nothing judged."""

    def setUp(self):
        rt.failures.clear()
        rt.model = torch.nn.Linear(4, 4)
        rt.SEED, rt.BATCH, rt.FEATURES = 1, 2, 4
        self.calls = []

    def repeat(self, again, forward=None, plain=False):
        rt.PLAIN = plain
        self.addCleanup(setattr, rt, "PLAIN", False)
        with contextlib.redirect_stdout(io.StringIO()) as out:
            rt.repeat_initialize_unjudged(1, again, forward or self.forward)
        return out.getvalue()

    def forward(self, x):
        self.calls.append(("forward", x, torch.is_grad_enabled()))
        return rt.model(x)

    def test_what_the_repeat_raises_is_printed_and_the_forward_still_runs(self):
        def refuse():
            self.calls.append("again")
            raise ValueError("model has already been initialized")
        self.assertEqual(self.repeat(refuse), "op 1: the repeated initialize raised ValueError: "
                                              "model has already been initialized\n")
        self.assertEqual(self.calls[0], "again")
        _, x, grad = self.calls[1]
        self.assertTrue(torch.equal(x, rt.probe_input(1)))  # the replay's probe input
        self.assertFalse(grad)
        self.assertEqual(rt.failures, [])  # I5's to judge, not this script's

    def test_an_accepted_repeat_says_nothing_and_plain_never_calls_it(self):
        self.assertEqual(self.repeat(lambda: self.calls.append("again")), "")
        self.assertEqual(self.repeat(lambda: self.calls.append("plain"), plain=True), "")
        self.assertEqual([c if isinstance(c, str) else c[0] for c in self.calls],
                         ["again", "forward", "forward"])

    def test_a_forward_that_raises_is_printed_not_a_failure(self):
        def broken(x):
            raise RuntimeError("partitioned")
        self.assertEqual(self.repeat(lambda: None, broken),
                         "op 1: the forward after it raised RuntimeError: partitioned\n")
        self.assertEqual(rt.failures, [])


class Fingerprint(unittest.TestCase):
    def test_changes_name_what_was_removed_changed_and_added_in_order(self):
        before = {"a": 1, "b": 2, "c": 3}
        self.assertEqual(rt.fingerprint_changes(before, {"b": 5, "c": 3, "d": 4}),
                         ["a: removed", "b: changed", "d: added"])
        self.assertEqual(rt.fingerprint_changes(before, dict(before)), [])

    def test_a_module_attribute_written_shows_and_reading_data_is_never_needed(self):
        model = torch.nn.Linear(2, 2)
        before = rt.fingerprint(model, [None])
        model.ds_id = 3
        self.assertEqual(rt.fingerprint_changes(before, rt.fingerprint(model, [None])),
                         ["module '' attribute 'ds_id': added"])


class Copier(unittest.TestCase):
    def test_a_function_comes_with_what_it_uses_and_nothing_else(self):
        text = rt.source(["check_user_attrs"])
        for needed in ("def check_user_attrs", "def same", "def show", "def fail(",
                       "def record_failure(", "ABSENT = "):
            self.assertIn(needed, text)
        for not_needed in ("def check_owner_by_attr", "def op_failed", "def skipped",
                           "model = None", "PREFIX = ", "ERRORS = "):
            self.assertNotIn(not_needed, text)
        namespace = {"torch": torch, "PREFIX": ""}
        exec(compile(text, "copied", "exec"), namespace)  # stands alone with the script's globals
        self.assertTrue(namespace["same"](1, 1))

    def test_the_closure_leaves_out_what_a_script_defines_itself(self):
        self.assertEqual(rt.closure(["check_user_attrs"],
                                    exclude=rt.SCRIPT_GLOBALS | {"same", "show", "fail"}),
                         {"check_user_attrs", "ABSENT"})
        self.assertIn("_reported", rt.closure(["check_user_attrs"]))

    def test_a_form_is_copied_under_its_general_name_in_place_of_it(self):
        forms = {**rt.PLAIN_FORMS, **rt.ONCE_FORMS}
        self.assertEqual(rt.closure(["check_user_attrs"], forms=forms),
                         {"check_user_attrs", "ABSENT", "same_plain", "show_plain",
                          "record_failure", "failures"})
        text = rt.source(["check_user_attrs"], forms=forms)
        for present in ("def same(expected, actual):", "def show(value):", "def fail(invariant,"):
            self.assertIn(present, text)
        for absent in ("def same_plain", "def show_plain", "def record_failure", "_reported",
                       "def show(value, depth"):
            self.assertNotIn(absent, text)
        namespace = {"torch": torch, "PREFIX": "", "model": torch.nn.Linear(2, 2),
                     "user_attrs": {("", "", "id"): 5}}
        exec(compile(text, "copied", "exec"), namespace)  # stands alone with the script's globals
        with contextlib.redirect_stdout(io.StringIO()) as out:
            namespace["check_user_attrs"](0)
            namespace["check_user_attrs"](1)  # the once form: reported again
        self.assertEqual(out.getvalue().count("FAILED I1 at op "), 2, out.getvalue())
        self.assertIn("module '' attribute 'id': expected 5, got <absent>", out.getvalue())

    def test_a_form_used_by_its_own_name_too_is_refused(self):
        with self.assertRaisesRegex(ValueError, "'show_plain' is used by its own name"):
            rt.closure(["show_plain"], forms=rt.PLAIN_FORMS)

    def test_an_unknown_name_is_refused(self):
        with self.assertRaisesRegex(KeyError, "defines no 'nothing'"):
            rt.source(["nothing"])


class CodeLines(unittest.TestCase):
    def test_comments_blank_lines_and_docstrings_are_not_code(self):
        text = ('"""Module\ndoc."""\n\n# a comment\nimport os\n\n\ndef f(x):\n'
                '    """Doc."""\n    return (x +\n            1)  # trailing\n')
        self.assertEqual(code_lines(text), 4)  # import, def, and the two lines of the return


if __name__ == "__main__":
    unittest.main()
