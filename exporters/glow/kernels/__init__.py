"""LLVM emitters, one module per op family (mirrors pegasus/ops/); importing registers them."""

from pegasus.exporters.glow.kernels import (  # noqa: F401  (each import registers its emitters)
    binary,
    conv,
    conv_pool,
    elementwise,
    identity,
    integer_conv,
    integer_conv_pool,
    integer_elementwise,
    integer_lut,
    integer_matmul,
    integer_pool,
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
