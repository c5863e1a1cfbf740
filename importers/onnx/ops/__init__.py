"""ONNX converters, one module per op family (mirrors pegasus/ops/); importing registers them."""

from pegasus.importers.onnx.ops import (  # noqa: F401  (each import registers its converters)
    constant,
    identity,
    elementwise,
    binary,
    quantize_linear,
    conv,
    linear,
    pool,
    normalization,
    shape_ops,
    resize,
    reduce,
    rnn,
)
