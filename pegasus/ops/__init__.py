"""The operator registry and its op families; importing this package registers every op.

One file per family; each op is one small class (see ``registry.OpDef``). To add an op, add its
class to the family file where it belongs (or a new file listed below).
"""

from pegasus.ops import (  # noqa: F401  (each import registers a family)
    binary,
    conv,
    elementwise,
    identity,
    integer,
    integer_lut,
    integer_prelu,
    integer_resize,
    integer_sum,
    linear,
    normalization,
    pool,
    quantize_linear,
    reduce,
    resize,
    rnn,
    shape_ops,
)
from pegasus.ops.registry import OpDef, all_ops, get_op, make_attrs, register

__all__ = ["OpDef", "all_ops", "get_op", "make_attrs", "register"]
