"""zerocheck_ds: replays zerocheck scenarios on upstream ZeRO-3 engines (DeepSpeed).

Reads scenario files (harness/SCENARIO_FORMAT.md), builds the module tree in PyTorch, runs the
operations through an adapter (deepspeed, passthrough, faulty) and checks the invariants an
upstream replay can check: I1 user attributes, I2 placement, I5 repeated initialize.
Entry point: `python3 -m zerocheck_ds` (runner.py).
"""

# The adapter names, torch-free so the command line can list them before importing torch.
ADAPTER_NAMES = ("deepspeed", "passthrough", "faulty")
