"""The engines under test: the adapter interface and the engines that need no DeepSpeed
(adapters.py), DeepSpeed's (deepspeed_adapter.py), make_adapter (make.py), who wrote what
(provenance.py) and DeepSpeed's source tree (deepspeed_tree.py)."""

# The adapter names, torch-free so the command line can list them before importing torch.
ADAPTER_NAMES = ("deepspeed", "passthrough", "faulty")
