"""Which dtypes a float kernel computes: ``FLOATS``, ``INTEGERS``, and ``require_dtype``, which refuses a layer
whose input has another (a PegasusError naming the layer)."""

from __future__ import annotations

from pegasus.errors import PegasusError
from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.ir.dtypes import DType


def require_dtype(k: KernelContext, allowed: tuple[DType, ...]) -> DType:
    dtype = k.inputs[0].type.dtype
    if dtype not in allowed:
        raise PegasusError(f"{k.node.op} on {dtype.value} is not supported by the Glow exporter "
                           f"(supported: {', '.join(d.value for d in allowed)})", where=f"layer '{k.node.name}'")
    return dtype


FLOATS = (DType.FLOAT32, DType.FLOAT16, DType.FLOAT64)
INTEGERS = (DType.INT8, DType.UINT8, DType.INT16, DType.UINT16, DType.INT32, DType.UINT32, DType.INT64,
            DType.UINT64)
