"""PyTorch converters, one module per op family (mirrors pegasus/ops/); importing registers them."""

from pegasus.importers.pytorch.ops import (  # noqa: F401  (each import registers its converters)
    attention,
    binary,
    conv,
    elementwise,
    normalization,
    plumbing,
    pool,
    reduce,
    resize,
    rnn,
    shape,
)
