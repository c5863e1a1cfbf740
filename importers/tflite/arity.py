"""How many leading inputs each TFLite builtin needs, checked for every node before its converter runs.

The flatbuffer lists an operator's inputs as tensor indices, -1 for an omitted optional one; nothing in the
file says which are required, so a crafted or damaged model may give a CONV_2D no filter or an ADD one operand.
The converters index ``node.inputs`` as the TFLite schema's operator definitions promise; this table states
those promises (the data inputs and the constant parameters up to the last required one) so a node that breaks
them is one line naming it. Ops not listed need one input; every node needs one output; CONCATENATION, PACK
and ADD_N need every input they list.
"""

from __future__ import annotations

from collections.abc import Sequence

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.tflite.ops.binary import BINARY, DIRECT
from pegasus.importers.tflite.ops.reduce import ARG_REDUCTIONS, REDUCTIONS

REQUIRED_INPUTS: dict[str, int] = {
    **dict.fromkeys(BINARY, 2), **dict.fromkeys(DIRECT, 2), **dict.fromkeys(REDUCTIONS, 2),
    **dict.fromkeys(ARG_REDUCTIONS, 2),
    "SQUARED_DIFFERENCE": 2, "NOT_EQUAL": 2, "FLOOR_MOD": 2, "FLOOR_DIV": 2, "SELECT": 3, "SELECT_V2": 3,
    "CONV_2D": 2, "DEPTHWISE_CONV_2D": 2, "FULLY_CONNECTED": 2, "TRANSPOSE_CONV": 3, "BATCH_MATMUL": 2,
    "PRELU": 2, "PAD": 2, "PADV2": 2, "MIRROR_PAD": 2, "SPLIT": 2, "SPLIT_V": 3, "GATHER": 2, "TILE": 2,
    "BROADCAST_TO": 2, "SPACE_TO_BATCH_ND": 3, "BATCH_TO_SPACE_ND": 3, "RESIZE_BILINEAR": 2,
    "RESIZE_NEAREST_NEIGHBOR": 2, "TRANSPOSE": 2, "EXPAND_DIMS": 2, "STRIDED_SLICE": 3, "SLICE": 3, "FILL": 2,
}

#: ops taking any number of inputs, none of which may be omitted
VARIADIC = {"CONCATENATION", "PACK", "ADD_N"}


def check_arity(nodes: Sequence[SourceNode]) -> None:
    """Refuse a node missing a required input or having no output (one line naming the node)."""
    for node in nodes:
        if not any(node.outputs):
            raise PegasusError(f"{node.describe()} has no output")
        needed = len(node.inputs) if node.op_type in VARIADIC else REQUIRED_INPUTS.get(node.op_type, 1)
        for index in range(needed):
            if not node.input(index):
                raise PegasusError(f"{node.describe()} lacks input {index} ({node.op_type} takes at least "
                                   f"{needed})")
