"""Caffe layer converters, one module per family; importing registers them."""

from pegasus.importers.caffe.layers import (  # noqa: F401  (each import registers its converters)
    activation,
    conv,
    normalization,
    pool,
    shape,
)
