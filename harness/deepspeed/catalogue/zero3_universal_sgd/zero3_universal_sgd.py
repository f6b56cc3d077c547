#!/usr/bin/env python3
"""DeepSpeed's universal checkpoint converter cannot convert a ZeRO-3 checkpoint of any optimizer
but Adam.

`deepspeed/checkpoint/ds_to_universal.py` reads each rank's ZeRO-3 optimizer state by Adam's
names (`extract_zero_shards_stage3`: `exp_avg`, `exp_avg_sq`), so a checkpoint written with SGD
(momentum: `momentum_buffer`) stops with `KeyError: 'exp_avg'` before anything is written, and a
run trained with SGD cannot be resumed on another number of ranks. The ZeRO-3 loader has the same
names hard-coded (stage3.py `load_hp_checkpoint_state_from_checkpoint_dir_stage3`). Upstream:
issue #8608 (open; found with Muon), fix PR #8609 (open).

Run on one rank (or on W ranks with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set), with the
working directory where `python3 -m deepspeed.checkpoint.ds_to_universal` works:
    DS_ACCELERATOR=cpu python3 zero3_universal_sgd.py [CHECKPOINT_DIR]
Prints REPRODUCED and exits 1 when the conversion fails, NOT REPRODUCED and exits 0 when it
writes the universal checkpoint. With --plain the same steps run on plain PyTorch (the optimizer
state saved and loaded back) and must not reproduce. Found by zerocheck's upstream suite with
--reshard (`op load into another world: ... KeyError: 'exp_avg'`); see REPORT.md beside this
script.
"""

import os
import socket
import subprocess
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


def plain(model, optimizer):
    """The same steps on plain PyTorch: the SGD (momentum) state saved and read back into a
    fresh optimizer, the resumption a universal checkpoint exists for."""
    model(torch.ones(2, 4)).pow(2).mean().backward()
    optimizer.step()
    path = os.path.join(tempfile.mkdtemp(), "t1.pt")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    state = torch.load(path)
    fresh = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    fresh.load_state_dict(state["optimizer"])
    print(f"plain PyTorch: SGD state saved and loaded back ({len(fresh.state)} parameter states)")
    print("NOT REPRODUCED")
    return 0


def main():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    config = {"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0.0,
              "zero_allow_untested_optimizer": True,
              "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if PLAIN:
        return plain(model, optimizer)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    loss = engine(torch.ones(2, 4)).pow(2).mean()
    engine.backward(loss)
    engine.step()
    folder = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] != "--plain" else tempfile.mkdtemp()
    engine.save_checkpoint(folder, tag="t1")
    if torch.distributed.get_rank() != 0:
        return 0
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    done = subprocess.run([sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal",
                           "--input_folder", os.path.join(folder, "t1"),
                           "--output_folder", os.path.join(folder, "universal", "t1"),
                           "--num_extract_workers", "1", "--num_merge_workers", "1"],
                          env=env, capture_output=True, text=True)
    lines = (done.stderr or done.stdout).strip().splitlines()
    print(f"ds_to_universal on an SGD (momentum) ZeRO-3 checkpoint: exit {done.returncode}, "
          f"{lines[-1] if lines else 'no output'}")
    if done.returncode != 0:
        print("REPRODUCED: the converter reads Adam's state names only")
        return 1
    print("NOT REPRODUCED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
