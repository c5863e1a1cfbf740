"""Every builtin op the float TFLite import covers, in models made by the TFLite converter (or written as
flatbuffers where the converter never emits the op), imported and compared with the TFLite interpreter
on random inputs (rtol 1e-4, atol 1e-5; integer outputs equal)."""

from __future__ import annotations

import pytest

from pegasus.importers.tflite.reader import read_tflite
from tests.importers.tflite import models
from tests.importers.tflite.harness import check_against_interpreter, op_types

pytestmark = pytest.mark.xdist_group("tflite")

FAMILIES = (models.unary_ops, models.prelu, models.binary_ops, models.reduce_ops, models.movement_ops,
            models.resize_ops, models.normalization_ops, models.conv_ops, models.handmade_ops,
            models.fused_activations, models.lstm, models.quantize_edges, models.dilated_conv1d,
            models.attention_ops, models.math_ops)

#: the builtins issue 11 lists for the float path
ISSUE_OPS = set("""CONV_2D DEPTHWISE_CONV_2D TRANSPOSE_CONV FULLY_CONNECTED ADD SUB MUL DIV MAXIMUM MINIMUM
SQUARED_DIFFERENCE RELU RELU6 RELU_N1_TO_1 RELU_0_TO_1 LEAKY_RELU PRELU LOGISTIC TANH HARD_SWISH ELU GELU EXP
LOG SQRT RSQRT ABS NEG MAX_POOL_2D AVERAGE_POOL_2D L2_POOL_2D MEAN SUM REDUCE_MAX REDUCE_MIN CONCATENATION
RESHAPE SQUEEZE EXPAND_DIMS TRANSPOSE PAD PADV2 MIRROR_PAD STRIDED_SLICE SLICE SPLIT SPLIT_V PACK UNPACK GATHER
TILE BROADCAST_TO RESIZE_BILINEAR RESIZE_NEAREST_NEIGHBOR DEPTH_TO_SPACE SPACE_TO_DEPTH SOFTMAX LOG_SOFTMAX
L2_NORMALIZATION QUANTIZE DEQUANTIZE ARG_MAX ARG_MIN CAST UNIDIRECTIONAL_SEQUENCE_LSTM DENSIFY""".split())

#: ops whose fused activation must be seen applied (other than NONE) somewhere in the models
FUSED = {"ADD", "SUB", "MUL", "DIV", "CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "FULLY_CONNECTED",
         "AVERAGE_POOL_2D", "MAX_POOL_2D", "L2_POOL_2D"}


@pytest.mark.parametrize("builder", FAMILIES, ids=lambda b: b.__name__)
def test_family_matches_interpreter(tflite_model, builder):
    check_against_interpreter(tflite_model(builder))


def test_nearest_resize_picks_tflites_pixels(tflite_model):
    """Every nearest-neighbour output equals TFLite's exactly, at ratios where the source coordinate is a whole
    number (or a tie) that float32 rounding puts on one side or the other."""
    path = tflite_model(models.resize_ratios)
    nearest = [n.outputs[0] for n in read_tflite(path).nodes if n.op_type == "RESIZE_NEAREST_NEIGHBOR"]
    assert len(nearest) == 45
    check_against_interpreter(path, outputs=nearest, rtol=0.0, atol=0.0, runs=1)
    check_against_interpreter(path, runs=1)   # and bilinear at those ratios within the usual tolerance


def test_models_cover_every_op(tflite_model):
    """The models of these tests (with float16_weights and sparse_weights, test_weights.py) hold every
    op of the issue's list, and a fused activation on every op that has one."""
    found: dict[str, list[dict]] = {}
    for builder in (*FAMILIES, models.float16_weights, models.sparse_weights):
        for op, attrs in op_types(tflite_model(builder)).items():
            found.setdefault(op, []).extend(attrs)
    assert ISSUE_OPS - set(found) == set()
    fused = {op for op, attrs in found.items() if any(a.get("fused_activation_function", "NONE") != "NONE"
                                                      for a in attrs)}
    assert FUSED - fused == set()
