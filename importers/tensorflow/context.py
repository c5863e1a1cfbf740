"""The TensorFlow converters' registry and context: the shared mechanism (importers/common/converters.py) plus
what only TensorFlow graphs need — the dtype a node declares for each output, the data_format of the spatial
ops, and dead tensors (the untaken side of a ``Switch`` whose predicate is known at compile time).

Converters register with ``@converter("Conv2D")`` (the op's TensorFlow name). Tensors a node receives as
parameters (a Reshape's shape, a reduction's axes) must be constants, which they are once the graph's shape
chains have folded: every input has a static shape.
"""

from __future__ import annotations

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import ConverterTable, ImportContext, SourceNode
from pegasus.ir.builder import GraphBuilder

TABLE = ConverterTable("TensorFlow")


converter = TABLE.converter


class TfContext(ImportContext):
    """The shared context plus the dtypes the graph declares and the dead tensors of resolved Switches."""

    def __init__(self, builder: GraphBuilder, dtypes: dict[str, str]):
        super().__init__(builder)
        self.dtypes = dtypes
        self.dead: set[str] = set()

    def ints(self, node: SourceNode, index: int, what: str) -> list[int]:
        value = self.constant(node, index, what)
        return [int(v) for v in np.asarray(value).reshape(-1)]

    def output_dtype(self, node: SourceNode, index: int = 0) -> str:
        dtype = self.dtypes.get(node.outputs[index])
        if dtype is None:
            raise PegasusError(f"{node.describe()}: the graph does not say the type of output {index}")
        return dtype

    @staticmethod
    def channels_last(node: SourceNode) -> bool:
        """True for NHWC (TensorFlow's default), False for NCHW; other formats are refused."""
        data_format = str(node.attrs.get("data_format", "NHWC"))
        if data_format not in ("NHWC", "NCHW", "NDHWC", "NCDHW", "NWC", "NCW"):
            raise PegasusError(f"{node.describe()}: data_format {data_format} is not supported")
        return data_format.endswith("C")

    @classmethod
    def spatial(cls, node: SourceNode, key: str, values: list[int] | None = None) -> tuple[int, ...]:
        """The spatial entries of a per-dimension attribute (strides, dilations, ksize; or ``values`` given in
        its place) in data_format order."""
        values = [int(v) for v in (node.attrs.get(key, []) if values is None else values)]
        if not values:
            return ()
        if len(values) < 3:
            return tuple(values)
        return tuple(values[1:-1]) if cls.channels_last(node) else tuple(values[2:])
