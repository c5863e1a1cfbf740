"""ONNX converters, one module per op family (mirrors pegasus/ops/); importing registers them."""

from pegasus.importers.onnx.ops import (  # noqa: F401  (each import registers its converters)
    binary,
    constant,
    conv,
    elementwise,
    identity,
    linear,
    normalization,
    pool,
    qlinear,
    quantize_linear,
    reduce,
    resize,
    rnn,
    shape_ops,
)
