"""ONNX converters for the linear family: Gemm (opset 7+, where ``broadcast`` is gone and C
broadcasts unidirectionally; C optional from 11) and MatMul map 1:1 onto the registry ops; Einsum (opset 12+,
one or two operands, what torch.einsum and tf2onnx write) becomes a MatMul between Transposes and Reshapes
(importers/common/einsum.py, shared with the TensorFlow importer)."""

from pegasus.importers.common.einsum import einsum
from pegasus.importers.onnx.registry import converter, direct

direct("Gemm", "MatMul")
converter("Einsum", since=12)(einsum)
