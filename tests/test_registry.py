"""Every op in the registry is complete: typed attributes with defaults, a shape rule and a float
reference kernel (later stages add their own pieces to this check). Fails naming the op."""

from __future__ import annotations

import dataclasses

import pytest

import pegasus.importers.onnx.ops  # noqa: F401  (registers the converters)
from pegasus.importers.onnx.registry import supported_op_types
from pegasus.ops.registry import OpDef, all_ops

OPS = all_ops()

# what issue 2 asks for at least (ONNX op names; each has a converter onto registry ops)
REQUIRED_ONNX_OPS = """Conv ConvTranspose Gemm MatMul Add Sub Mul Div Sum Max Min Mean Relu LeakyRelu PRelu Clip
Sigmoid HardSigmoid HardSwish Tanh Elu Selu Softplus Softsign Exp Log Sqrt Reciprocal Pow Abs Neg Floor Ceil Erf
Gelu MaxPool AveragePool GlobalAveragePool GlobalMaxPool BatchNormalization InstanceNormalization
LayerNormalization LRN Concat Split Slice Reshape Flatten Transpose Squeeze Unsqueeze Expand Tile Pad Resize
Upsample DepthToSpace SpaceToDepth Softmax LogSoftmax ReduceMean ReduceSum ReduceMax ReduceMin ReduceL2 ArgMax
Gather Cast Constant Identity Dropout Shape ConstantOfShape Range Where Equal Less Greater QuantizeLinear
DequantizeLinear LSTM GRU""".split()


def _overrides(cls: type[OpDef], method: str) -> bool:
    return getattr(cls, method) is not getattr(OpDef, method) and method in {
        name for klass in cls.__mro__ if klass is not OpDef for name in vars(klass)}


@pytest.mark.parametrize("name", list(OPS))
def test_op_entry_is_complete(name):
    cls = OPS[name]
    assert cls.name == name
    assert cls.__doc__ and cls.__doc__.strip(), f"{name}: no docstring"
    assert dataclasses.is_dataclass(cls.Attrs), f"{name}: Attrs is not a dataclass"
    assert cls.Attrs.__dataclass_params__.frozen, f"{name}: Attrs must be frozen"
    for field in dataclasses.fields(cls.Attrs):
        has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
        assert has_default, f"{name}: attribute '{field.name}' has no default"
    for piece in ("infer", "reference"):
        assert _overrides(cls, piece), f"{name}: missing {piece}"


@pytest.mark.parametrize("onnx_op", REQUIRED_ONNX_OPS)
def test_required_onnx_op_has_converter(onnx_op):
    assert onnx_op in supported_op_types(), f"ONNX op {onnx_op} has no converter"
