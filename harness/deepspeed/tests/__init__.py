"""Tests of the zerocheck_ds upstream replay runner (unittest; no DeepSpeed needed)."""
