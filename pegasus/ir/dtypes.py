"""The element types a tensor can have, and their spellings in NumPy, ONNX and pegasus files.

One enum so that importers, the interpreter, the quantizer and the code generator agree on what
"int8" means; ``DType.from_numpy``/``from_onnx`` are the only places those mappings live.
"""

from __future__ import annotations

import enum

import numpy as np


class DType(enum.Enum):
    """Tensor element type; the value is the name written into NAME.json."""

    FLOAT32 = "float32"
    FLOAT16 = "float16"
    FLOAT64 = "float64"
    INT8 = "int8"
    UINT8 = "uint8"
    INT16 = "int16"
    UINT16 = "uint16"
    INT32 = "int32"
    UINT32 = "uint32"
    INT64 = "int64"
    UINT64 = "uint64"
    BOOL = "bool"

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(self.value)

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    @property
    def is_float(self) -> bool:
        return self in (DType.FLOAT32, DType.FLOAT16, DType.FLOAT64)

    @property
    def is_integer(self) -> bool:
        return not self.is_float and self is not DType.BOOL

    @classmethod
    def from_numpy(cls, dtype) -> DType:
        name = np.dtype(dtype).name
        try:
            return cls(name)
        except ValueError:
            raise TypeError(f"no pegasus dtype for numpy dtype {name}") from None

    @classmethod
    def parse(cls, text: str) -> DType:
        """Parse a user's spelling: 'float', 'float32', 'int8', 'uint8', ..."""
        aliases = {"float": "float32", "double": "float64", "half": "float16", "int": "int32", "long": "int64"}
        key = aliases.get(text.strip().lower(), text.strip().lower())
        try:
            return cls(key)
        except ValueError:
            valid = ", ".join(d.value for d in cls)
            raise ValueError(f"unknown dtype '{text}' (valid: float, {valid})") from None

    @classmethod
    def from_onnx(cls, elem_type: int) -> DType:
        from onnx import TensorProto

        table = {
            TensorProto.FLOAT: cls.FLOAT32, TensorProto.FLOAT16: cls.FLOAT16, TensorProto.DOUBLE: cls.FLOAT64,
            TensorProto.INT8: cls.INT8, TensorProto.UINT8: cls.UINT8, TensorProto.INT16: cls.INT16,
            TensorProto.UINT16: cls.UINT16, TensorProto.INT32: cls.INT32, TensorProto.UINT32: cls.UINT32,
            TensorProto.INT64: cls.INT64, TensorProto.UINT64: cls.UINT64, TensorProto.BOOL: cls.BOOL,
        }
        if elem_type not in table:
            name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else elem_type
            raise TypeError(f"ONNX element type {name} is not supported")
        return table[elem_type]
