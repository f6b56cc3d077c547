#!/usr/bin/env python3
"""DeepSpeed ZeRO-3's `load_checkpoint(dir, tag, load_module_only=True)` loads nothing.

Train a step, save under tag t1, train another step, then load t1 with `load_module_only=True`
(and `load_checkpoint`'s default `load_optimizer_states=True`): the weights should be t1's again.
Under ZeRO-3 they stay what they were before the load. The module state is taken from
`mp_rank_00_model_states.pt`, which under ZeRO-3 holds empty placeholders for the partitioned
weights; the ZeRO checkpoint, which holds them, is skipped (`load_optimizer_states and not
load_module_only` is false); and `_restore_from_bit16_weights` copies the unchanged shards back.
No error, and `load_checkpoint` returns the path it "loaded". Upstream's own test of
load_module_only passes `load_optimizer_states=False`, which takes another branch.

Run on one rank (or on W ranks with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set):
    DS_ACCELERATOR=cpu python3 zero3_load_module_only.py [CHECKPOINT_DIR]
Prints REPRODUCED and exits 1 when the weights after the load are not t1's, NOT REPRODUCED and
exits 0 when they are. With --plain the same steps run on plain PyTorch (torch.save and
load_state_dict) and must not reproduce. Found by zerocheck's upstream suite (I6: after the load
the value is the value before the load); see REPORT.md beside this script.
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

FOLDER = next((a for a in sys.argv[1:] if a != "--plain"), None) or tempfile.mkdtemp()


def full_weights(model):
    """Every parameter's full value (gathered from the ranks under ZeRO-3)."""
    params = list(model.parameters())
    if PLAIN:
        return [p.detach().clone() for p in params]
    with deepspeed.zero.GatheredParameters(params):
        return [p.detach().clone() for p in params]


def train_step(engine, optimizer):
    loss = engine(torch.ones(2, 4)).pow(2).mean()
    if PLAIN:
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    else:
        engine.backward(loss)
        engine.step()


def main():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    config = {"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0.0,
              "zero_allow_untested_optimizer": True,
              "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
    engine = model
    if not PLAIN:
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    train_step(engine, optimizer)
    saved = full_weights(model)
    if PLAIN:
        torch.save(model.state_dict(), os.path.join(FOLDER, "t1.pt"))
    else:
        engine.save_checkpoint(FOLDER, tag="t1")
    train_step(engine, optimizer)
    before = full_weights(model)
    if PLAIN:
        model.load_state_dict(torch.load(os.path.join(FOLDER, "t1.pt")))
    else:
        path, _ = engine.load_checkpoint(FOLDER, tag="t1", load_module_only=True)
        print(f"load_checkpoint(tag='t1', load_module_only=True) returned {path is not None}")
    after = full_weights(model)
    loaded = all(torch.equal(a, s) for a, s in zip(after, saved))
    unchanged = all(torch.equal(a, b) for a, b in zip(after, before))
    first = "0.weight[0, 0]"
    print(f"{first}: saved at t1 {saved[0][0, 0].item():.6f}, before the load "
          f"{before[0][0, 0].item():.6f}, after the load {after[0][0, 0].item():.6f}")
    if not loaded:
        print("REPRODUCED: the weights after load_checkpoint(load_module_only=True) are not the "
              "checkpoint's" + (" (they are the weights before the load)" if unchanged else ""))
        return 1
    print("NOT REPRODUCED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
