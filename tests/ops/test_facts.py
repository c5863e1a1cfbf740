"""The op facts (pegasus/ops/facts.py): what the registry says about an op by name, declared once per op."""

from __future__ import annotations

import pytest

from pegasus.ops.facts import has_fact, is_bias, op_facts, ops_with, weight_axis
from pegasus.ops.registry import make_attrs


def test_tied_is_value_preserving_or_keeps_the_input_grid():
    assert set(ops_with("value_preserving")) < set(ops_with("tied"))
    assert set(ops_with("tied")) - set(ops_with("value_preserving")) == {"MaxPool", "GlobalMaxPool", "Pad", "Resize"}
    assert op_facts("Reshape").value_preserving and not op_facts("Conv").tied


def test_channel_affine_and_clamp():
    assert op_facts("Sub").channel_affine == ((0,), "negative shift")
    assert op_facts("Div").channel_affine is None
    assert ops_with("clamp") == ("Clip", "Relu")


def test_weight_axis_and_bias():
    assert weight_axis("Conv", make_attrs("Conv"), 1, 4) == 0
    assert weight_axis("ConvTranspose", make_attrs("ConvTranspose"), 1, 4) == 1
    assert weight_axis("Gemm", make_attrs("Gemm", transB=1), 1, 2) == 0
    assert weight_axis("Gemm", make_attrs("Gemm"), 1, 2) == 1
    assert weight_axis("MatMul", make_attrs("MatMul"), 1, 3) == 2
    assert weight_axis("MatMul", make_attrs("MatMul"), 1, 1) is None
    assert weight_axis("Conv", make_attrs("Conv"), 2, 1) is None and weight_axis("Relu", None, 1, 4) is None
    assert is_bias("Gemm", 2) and not is_bias("Gemm", 1) and not is_bias("MatMul", 2)


def test_unknown_fact_or_op():
    with pytest.raises(KeyError, match="not an op fact"):
        ops_with("passthrough")
    assert not has_fact("Conv_Relu_MaxPool", "fusable_pool")   # a fused layer's name is no registry op
    with pytest.raises(KeyError, match="not in the registry"):
        op_facts("Conv_Relu")
