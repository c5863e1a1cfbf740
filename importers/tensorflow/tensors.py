"""A TensorProto (a Const's value, any tensor attribute) as a NumPy array, its declared size checked first.

TensorFlow's ``MakeNdarray`` allocates whatever shape a proto declares and repeats its last value to fill it: a
133-byte GraphDef whose Const declares shape [2^30] with one float takes gigabytes, and every node's attributes
are decoded when a graph is read, used or not. So before ``MakeNdarray`` runs, the dtype must be one pegasus
knows, the dims non-negative, the tensor within the size budget (pegasus.limits), ``tensor_content`` exactly as
long as the shape needs, and the repeated values no more than its elements.
"""

from __future__ import annotations

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.tensorflow.dtypes import NUMERIC, dtype_name
from pegasus.limits import check_tensor

#: bytes per element of the dtypes a tensor attribute may have (strings: the size of a reference, the bytes
#: themselves are in the file already)
ITEMSIZE = {**{enum: np.dtype(name).itemsize for enum, name in NUMERIC.items()},
            7: 8, 11: 1, 12: 1, 13: 4, 14: 2, 15: 2, 16: 2}
#: the repeated fields a TensorProto holds values in (complex ones: two numbers per element)
VALUE_FIELDS = ("half_val", "float_val", "double_val", "int_val", "string_val", "scomplex_val", "int64_val",
                "bool_val", "dcomplex_val", "uint32_val", "uint64_val")
COMPLEX = (8, 18)


def decode_tensor(proto, api, what: str) -> np.ndarray:
    """The array a TensorProto holds; ``what`` names it (node and attribute) for errors."""
    enum = int(proto.dtype)
    if enum not in ITEMSIZE:
        raise PegasusError(f"{what}: a tensor of dtype {dtype_name(enum)}, which pegasus cannot read")
    if proto.tensor_shape.unknown_rank:
        raise PegasusError(f"{what}: a constant tensor without a shape")
    shape = [int(dim.size) for dim in proto.tensor_shape.dim]
    nbytes = check_tensor(shape, ITEMSIZE[enum], what)
    count = nbytes // ITEMSIZE[enum] if ITEMSIZE[enum] else 0
    if proto.tensor_content:
        if enum == 7 or len(proto.tensor_content) != nbytes:
            raise PegasusError(f"{what}: the tensor's content has {len(proto.tensor_content)} bytes but its shape "
                               f"{shape} needs {nbytes}")
    else:
        values = max(len(getattr(proto, name)) for name in VALUE_FIELDS)
        if values > count * (2 if enum in COMPLEX else 1):
            raise PegasusError(f"{what}: the tensor holds {values} values but its shape {shape} has {count} elements")
    try:
        return api.make_ndarray(proto)
    except (ValueError, TypeError) as exc:
        raise PegasusError(f"{what}: the tensor cannot be read ({str(exc).splitlines()[0] if str(exc) else exc})"
                           ) from None
