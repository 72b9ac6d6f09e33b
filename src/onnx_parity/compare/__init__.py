"""Comparing outputs: pure numpy from (expected, actual, tolerance) to per-output verdicts, the
metrics reduced precision is judged by, and the regression check against a baseline run."""
