"""zerocheck_ds: replays zerocheck scenarios on upstream ZeRO-3 engines (DeepSpeed).

Reads scenario files (harness/SCENARIO_FORMAT.md), builds the module tree in PyTorch, runs the
operations through an adapter (deepspeed, passthrough, faulty) and checks the invariants an
upstream replay can check. Entry point: `python3 -m zerocheck_ds` (__main__.py: the in-process
runner, `suite`, `worker`, `bisect`, `bisect-step`).

The package is layers, one subpackage per job, listed in LAYERS from the ground up. A module
imports only modules of its own subpackage (never in a circle) and of subpackages on lower
layers, at the top of a file or inside a function alike; ci/tests/python_layers.py checks it.
"""

# Subpackage -> its job, from the ground up: each may import only those above it in this list.
LAYERS = (
    ("scenario", "the scenario language: schema tables, strict JSON, config, placement; torch-free"),
    ("world", "the rank's world: torch.distributed start and stop, the checks' object exchange"),
    ("model", "what must hold: the module tree, the dense twin, partition rules, seeded values"),
    ("findings", "verdicts, signatures, root causes, the report, drafts, baseline, summary schema"),
    ("oracles", "the checks: the engine's observed state, the attribute ledger, I1-I10's oracles"),
    ("engines", "the engines under test: the adapters, DeepSpeed's, provenance of writes"),
    ("replay", "one scenario on one rank, op by op; a load resumed in another world"),
    ("repro", "shrink, minimise, standalone repro scripts, bisect"),
    ("suite", "the supervised suite: runner, workers, pool, control"),
)
