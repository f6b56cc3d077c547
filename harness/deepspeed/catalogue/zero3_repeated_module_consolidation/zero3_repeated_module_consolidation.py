#!/usr/bin/env python3
"""DeepSpeed ZeRO-3's consolidated state dicts drop the second path of a module used twice.

A Sequential that holds the same Linear at index 0 and 2 (a tied block, as weight-shared layers
are built) has the state dict keys 0.weight, 0.bias, 2.weight and 2.bias, and
`model.load_state_dict` (strict) wants all four. Both of ZeRO-3's consolidations leave out
2.weight and 2.bias: the engine's `_zero3_consolidated_16bit_state_dict` (it walks the modules
with `named_children`, which yields a module once) and zero_to_fp32's
`get_fp32_state_dict_from_zero_checkpoint` (it names parameters by `named_parameters`, which
yields a parameter once, and recovers only shared *parameters*, PR #3033). A state dict so
consolidated cannot be loaded back into the model it came from.

Run on one rank (or on W ranks with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set):
    DS_ACCELERATOR=cpu python3 zero3_repeated_module_consolidation.py [CHECKPOINT_DIR]
Prints REPRODUCED and exits 1 when a key of the model's state dict is missing from either
consolidation, NOT REPRODUCED and exits 0 otherwise. With --plain the same steps run on plain
PyTorch (the state dict saved with torch.save and read back) and must not reproduce. Found by
zerocheck's upstream suite (I6: a key of the model's state dict missing after a save); see
REPORT.md beside this script.
"""

import os
import socket
import sys
import tempfile

import torch

for name, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"),
                    ("MASTER_ADDR", "127.0.0.1")):
    os.environ.setdefault(name, value)
if "MASTER_PORT" not in os.environ:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(s.getsockname()[1])

PLAIN = "--plain" in sys.argv  # the same steps on plain PyTorch: the control
if not PLAIN:
    import deepspeed  # noqa: E402
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint  # noqa: E402


def plain(model):
    """The same steps on plain PyTorch: both "consolidations" are the model's own state dict, the
    second read back from a file."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(2, 4)).pow(2).mean().backward()
    optimizer.step()
    path = os.path.join(sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] != "--plain"
                        else tempfile.mkdtemp(), "model.pt")
    torch.save(model.state_dict(), path)
    return model.state_dict(), torch.load(path)


def main():
    torch.manual_seed(0)
    block = torch.nn.Linear(4, 4)
    model = torch.nn.Sequential(block, torch.nn.Tanh(), block)  # the same module twice
    keys = sorted(model.state_dict().keys())
    if PLAIN:
        return report(keys, *plain(model))
    config = {"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0.0,
              "zero_allow_untested_optimizer": True,
              "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), config=config)
    loss = engine(torch.ones(2, 4)).pow(2).mean()
    engine.backward(loss)
    engine.step()
    folder = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] != "--plain" else tempfile.mkdtemp()
    engine.save_checkpoint(folder)
    sixteen = engine._zero3_consolidated_16bit_state_dict()  # every rank gathers
    if torch.distributed.get_rank() != 0:
        return 0
    return report(keys, sixteen, get_fp32_state_dict_from_zero_checkpoint(folder))


def report(keys, sixteen, fp32):
    missing = {"_zero3_consolidated_16bit_state_dict": sorted(set(keys) - set(sixteen)),
               "get_fp32_state_dict_from_zero_checkpoint": sorted(set(keys) - set(fp32))}
    print(f"the model's state dict keys: {keys}")
    for what, lost in missing.items():
        print(f"{what}: missing {lost or 'nothing'}")
    if any(missing.values()):
        print("REPRODUCED: a consolidated state dict lacks keys of the model's own state dict")
        return 1
    print("NOT REPRODUCED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
