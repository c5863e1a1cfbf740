"""Integer lowering rules, one file per op family; importing this package registers them all.

To give an op an integer kernel, add an ``@integer_rule("Op")`` function to its family's file here;
ops without a rule run in float between converters (and the export says so)."""

from pegasus.quantized.rules import (  # noqa: F401
    conv_transpose,
    elementwise,
    linear,
    pool,
    prelu,
    softmax,
    tflite,
    tflite_tables,
    values,
)
