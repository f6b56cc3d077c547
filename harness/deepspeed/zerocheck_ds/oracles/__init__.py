"""The checks: the engine's observed state (engine_state.py), the attribute ledger, I5's
fingerprint and refusal rule (fingerprint.py), I1/I2/I5 (oracles.py), I3/I4/I9 (numerics.py) and
I6 (checkpoints.py)."""
