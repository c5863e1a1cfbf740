"""TFLite converters, one module per op family (mirrors pegasus/ops/); importing registers them."""

from pegasus.importers.tflite.ops import conv, pool, shape_ops  # noqa: F401  (each import registers its converters)
