"""The TFLite converters' registry and context: the shared mechanism (importers/common/converters.py) plus
what only TFLite has — tensors carrying quantization parameters, and weights stored as float16 or int8
that the float graph holds as float32.

Converters register with ``@converter("CONV_2D")`` (the builtin operator's name; custom ops are in domain
``custom`` and have no converters, so they are listed as unsupported).
"""

from __future__ import annotations

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import ConverterTable, ImportContext, SourceNode
from pegasus.importers.tflite.reader import TfliteTensor
from pegasus.ir.builder import GraphBuilder

TABLE = ConverterTable("TFLite")


converter = TABLE.converter


def dequantized(tensor: TfliteTensor, data: np.ndarray) -> np.ndarray:
    """A constant's real values: (q - zero_point) * scale per tensor or along its quantized axis."""
    if not tensor.quantized:
        return data.astype(np.float32)
    shape = [1] * data.ndim
    if tensor.scale.size > 1:
        shape[tensor.axis] = -1
    scale = tensor.scale.astype(np.float64).reshape(shape)
    zero = tensor.zero_point.astype(np.float64).reshape(shape)
    real = (data.astype(np.float64) - zero) * scale
    if not np.all(np.abs(real) <= np.finfo(np.float32).max):  # a scale from the file: NaN, inf or 1e38
        raise PegasusError(f"tensor '{tensor.name}': its quantization scale {tensor.scale.reshape(-1)[:4].tolist()} "
                           "gives values that are not finite float32 numbers")
    return real.astype(np.float32)


class TfliteContext(ImportContext):
    """The shared context plus the file's tensors by name (quantization parameters, variables)."""

    def __init__(self, builder: GraphBuilder, tensors: dict[str, TfliteTensor]):
        super().__init__(builder)
        self.tensors = tensors
        #: integer weight tensors ``weights`` turned into float (a dynamic-range model's), by name -> dtype
        self.dequantized: dict[str, str] = {}

    @staticmethod
    def require(node: SourceNode, index: int, what: str) -> None:
        """A required input the file left out (index -1, or fewer inputs) is one line naming the node."""
        if not node.input(index):
            raise PegasusError(f"{node.describe()} lacks its {what} (input {index})")

    def weights(self, node: SourceNode, index: int, what: str, optional: bool = False) -> np.ndarray | None:
        """Input ``index`` as float32 constant values (float16 and int8/uint8 weights converted); None if
        an ``optional`` input is omitted (a required one omitted is an error)."""
        if not optional:
            self.require(node, index, what)
        value = self.constant(node, index, what)
        if value is None:
            return None
        tensor = self.tensors.get(node.input(index))
        if np.issubdtype(value.dtype, np.floating) or tensor is None or not tensor.quantized:
            return value.astype(np.float32)
        self.dequantized[tensor.name] = str(value.dtype)
        return dequantized(tensor, value)

    def ints(self, node: SourceNode, index: int, what: str, optional: bool = False) -> list[int] | None:
        if not optional:
            self.require(node, index, what)
        value = self.constant(node, index, what)
        return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]

    @staticmethod
    def activation(node: SourceNode) -> str:
        return str(node.attrs.get("fused_activation_function", "NONE"))
