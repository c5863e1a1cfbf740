"""Identity: passes its input through. Importers map Identity and inference-time Dropout onto it;
the remove_identity pass deletes it, so it never reaches an exporter."""

from __future__ import annotations

import numpy as np

from pegasus.ops.common import Unary
from pegasus.ops.registry import register


@register
class Identity(Unary):
    """y = x (a copy when input and output do not share memory)."""

    name = "Identity"
    alias = True

    @staticmethod
    def fn(attrs, x: np.ndarray) -> np.ndarray:
        return x.copy()
