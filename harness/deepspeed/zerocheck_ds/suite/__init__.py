"""The supervised suite: the in-process runner (runner.py), one rank's worker (worker.py), the
pool of ranks (pool.py), confirmation (control.py) and the suite itself (suite.py)."""
