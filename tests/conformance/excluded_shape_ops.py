"""Data-movement cases we do not run (Reshape, Slice, Pad, Gather, Shape, Range...): none.

The runner already skips cases whose tensors have a dtype pegasus lacks (bfloat16 Range).
"""

EXCLUDED: dict[str, str] = {}
