"""ONNX converters for the linear family: Gemm (opset 7+, where ``broadcast`` is gone and C
broadcasts unidirectionally; C optional from 11) and MatMul map 1:1 onto the registry ops."""

from pegasus.importers.onnx.registry import direct

direct("Gemm", "MatMul")
