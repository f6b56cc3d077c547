"""From a finding to a small repro: shrink and minimise the scenario, write a standalone script
(repro_script.py, repro_straight.py, repro_twin.py over script_parts.py, general_steps.py and
repro_runtime.py), bisect the first bad upstream commit (bisect.py)."""
