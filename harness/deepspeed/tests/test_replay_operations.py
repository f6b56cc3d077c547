"""Each operation of the schema is the function of its name in one family file of replay/
(lifecycle, training, attributes, checkpoints), taking the replay and the operation, and the
replay finds it there: an operation with no function, or a function no operation, fails loudly."""

import inspect
import types
import unittest

import torch

from zerocheck_ds.model.tree import RouteCursor
from zerocheck_ds.replay import attributes, checkpoints, lifecycle, replay, training
from zerocheck_ds.scenario import schema


def family(**functions):
    return types.SimpleNamespace(OPERATIONS=tuple(functions), **functions)


class OperationsTest(unittest.TestCase):
    def test_every_operation_is_the_same_named_function_of_one_family(self):
        self.assertEqual(set(replay.OPERATIONS), set(schema.OPS))
        for name, function in replay.OPERATIONS.items():
            self.assertEqual(function.__name__, name)
            self.assertEqual(list(inspect.signature(function).parameters), ["replay", "op"], name)
        self.assertEqual(replay.FAMILIES, (lifecycle, training, attributes, checkpoints))

    def test_an_operation_with_no_function_fails(self):
        without_gather = family(**{name: f for name, f in replay.OPERATIONS.items()
                                   if name != "gather"})
        with self.assertRaisesRegex(AssertionError, r"missing \['gather'\]"):
            replay.operation_functions((without_gather,))

    def test_a_function_that_is_no_operation_fails(self):
        with self.assertRaisesRegex(AssertionError, r"not in the schema \['rewind'\]"):
            replay.operation_functions(replay.FAMILIES + (family(rewind=lambda replay, op: None),))

    def test_an_operation_in_two_families_fails(self):
        with self.assertRaisesRegex(AssertionError, "'save' is in two families"):
            replay.operation_functions(replay.FAMILIES + (family(save=checkpoints.save),))


class UsersOwnForward(unittest.TestCase):
    """With no engine at the root, the user calls the model with the input as the model takes it."""

    def test_a_model_an_engine_left_in_bf16_gets_its_input_in_bf16(self):
        torch.manual_seed(0)
        root = torch.nn.Linear(3, 2).to(torch.bfloat16)  # as a released bf16 engine leaves it
        user = types.SimpleNamespace(root=root, live=[])
        x = torch.randn(4, 3)
        out = training.run_forward(user, x, RouteCursor([]))
        self.assertEqual(out.dtype, torch.bfloat16)
        self.assertTrue(torch.equal(out, root(x.to(torch.bfloat16))))

    def test_an_fp32_model_gets_the_input_as_it_is(self):
        root = torch.nn.Linear(3, 2)
        x = torch.randn(4, 3)
        out = training.run_forward(types.SimpleNamespace(root=root, live=[]), x, RouteCursor([]))
        self.assertTrue(torch.equal(out, root(x)))


if __name__ == "__main__":
    unittest.main()
