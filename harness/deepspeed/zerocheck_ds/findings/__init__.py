"""What a replay found: verdicts and tallies (verdict.py), signatures, outcomes, root causes,
the report, issue drafts, the baseline and the summary's schema (summary_schema.json)."""
