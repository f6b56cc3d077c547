#!/usr/bin/env python3
"""A deepspeed.initialize that fails late leaves its engine's forward hooks on the user's model.

DeepSpeed master's `DeepSpeedEngine.__init__` registers a forward pre-hook and a forward hook on
the model (engine.py `_create_module_forward_pre_hook` / `_create_module_forward_post_hook`)
before it sets `self.engine_timers`. When initialize raises between the two, here because the
config offloads the optimizer to the CPU while the client passes a torch optimizer
(`_configure_optimizer` raises ZeRORuntimeException: `zero_force_ds_cpu_optimizer` is true by
default), the user gets the error and a model that still carries the half-built engine's hooks:
every later plain `model(x)` raises AttributeError: 'DeepSpeedEngine' object has no attribute
'engine_timers' (from `_forward_prologue`). DeepSpeed v0.14.5 registers no such hooks there and
does not reproduce.

Run on one rank:
    DS_ACCELERATOR=cpu python3 zero3_failed_initialize_leaves_hooks.py
Prints REPRODUCED and exits 1 when the refused initialize left a hook on the model or the plain
forward after it fails, NOT REPRODUCED and exits 0 otherwise. With --plain no DeepSpeed runs (the
model as plain PyTorch leaves it) and it must not reproduce. Found by zerocheck's upstream suite
(I5, `config_error` `offload_optimizer`); see REPORT.md beside this script.
"""

import os
import socket
import sys

import torch

for name, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"),
                    ("MASTER_ADDR", "127.0.0.1")):
    os.environ.setdefault(name, value)
if "MASTER_PORT" not in os.environ:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(s.getsockname()[1])

PLAIN = "--plain" in sys.argv  # plain PyTorch, no initialize: the control
if not PLAIN:
    import deepspeed  # noqa: E402


def main():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    hooks_before = len(model._forward_pre_hooks) + len(model._forward_hooks)
    config = {"train_micro_batch_size_per_gpu": 1, "zero_allow_untested_optimizer": True,
              "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}
    try:
        if PLAIN:
            raise RuntimeError("plain PyTorch: no deepspeed.initialize")
        deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                             config=config)
        print("NOT REPRODUCED: the initialize was accepted (the config is meant to be refused)")
        return 0
    except Exception as e:  # noqa: BLE001 - what it raised is shown, whatever it is
        print(f"initialize refused: {type(e).__name__}: {str(e)[:120]}...")
    left = len(model._forward_pre_hooks) + len(model._forward_hooks) - hooks_before
    try:
        model(torch.ones(1, 4))
        forward = "runs"
    except Exception as e:  # noqa: BLE001
        forward = f"raises {type(e).__name__}: {e}"
    print(f"hooks left on the model: {left}; a plain forward afterwards {forward}")
    if left or forward != "runs":
        print("REPRODUCED")
        return 1
    print("NOT REPRODUCED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
