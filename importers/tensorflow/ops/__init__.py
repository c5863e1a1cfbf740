"""TensorFlow converters, one module per op family (mirrors pegasus/ops/); importing registers them."""

from pegasus.importers.tensorflow.ops import (  # noqa: F401  (each import registers its converters)
    control,
    conv,
    elementwise,
    linear,
    movement,
    pool,
    reduce,
    shape_ops,
)
