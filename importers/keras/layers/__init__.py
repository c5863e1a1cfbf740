"""Keras converters, one module per layer family; importing registers them."""

from pegasus.importers.keras.layers import (  # noqa: F401  (each import registers its converters)
    applications,
    attention,
    conv,
    core,
    merge,
    normalization,
    ops,
    pool,
    preprocessing,
    reshaping,
    rnn,
    tensor_ops,
)
