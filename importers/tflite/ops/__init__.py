"""TFLite converters, one module per op family (mirrors pegasus/ops/); importing registers them."""

from pegasus.importers.tflite.ops import (  # noqa: F401  (each import registers its converters)
    binary,
    conv,
    elementwise,
    movement,
    normalization,
    pool,
    quantize,
    reduce,
    resize,
    rnn,
    shape_ops,
)
