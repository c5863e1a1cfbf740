"""ONNX converters for the broadcasting element-wise ops (pegasus/ops/binary.py).

All map 1:1. Registered from opset 7: before it Add/Sub/Mul/Div/... carried ``broadcast``/``axis``
attributes with a different broadcasting rule, and pegasus imports opset 7 and newer only.
"""

from __future__ import annotations

from pegasus.importers.onnx.registry import direct

direct("Add", "Sub", "Mul", "Div", "Pow", "PRelu", "Max", "Min", "Sum", "Mean", "Equal", "Less", "Greater",
       "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Where", "Mod", "BitShift", since=7)
