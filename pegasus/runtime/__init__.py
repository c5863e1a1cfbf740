"""The reference interpreter (float; integer later) and its input/output helpers."""
