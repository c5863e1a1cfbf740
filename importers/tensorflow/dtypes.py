"""TensorFlow's DataType enum as NumPy dtype names: one table for the graph reader (nodes.py), constant tensors
(tensors.py) and checkpoints (checkpoint.py)."""

from __future__ import annotations

#: TensorFlow DataType enum -> NumPy dtype name (or TensorFlow's name for types pegasus has no use for)
DTYPES = {1: "float32", 2: "float64", 3: "int32", 4: "uint8", 5: "int16", 6: "int8", 7: "string", 8: "complex64",
          9: "int64", 10: "bool", 11: "qint8", 12: "quint8", 13: "qint32", 14: "bfloat16", 15: "qint16",
          16: "quint16", 17: "uint16", 18: "complex128", 19: "float16", 20: "resource", 21: "variant",
          22: "uint32", 23: "uint64"}
#: the plain numeric ones, stored little-endian in C order (in a checkpoint, a tensor_content)
NUMERIC = {enum: name for enum, name in DTYPES.items()
           if enum in (1, 2, 3, 4, 5, 6, 8, 9, 10, 17, 18, 19, 22, 23)}


def dtype_name(enum: int) -> str:
    return DTYPES.get(int(enum) % 100, f"type {enum}")   # 101.. are reference types (TF1 variables)
