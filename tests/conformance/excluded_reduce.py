"""Reduction cases we do not run (Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax): none."""

EXCLUDED: dict[str, str] = {}
