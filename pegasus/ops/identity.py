"""Identity: passes its input through. Importers map Identity and inference-time Dropout onto it;
the remove_identity pass deletes it, so it never reaches an exporter. DtypeConverter is the same
identity in float, kept as a visible precision boundary in hybrid-quantized graphs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pegasus.ops.common import Unary
from pegasus.ops.registry import register


@register
class Identity(Unary):
    """y = x (a copy when input and output do not share memory)."""

    name = "Identity"
    value_preserving = True
    alias = True

    @staticmethod
    def fn(attrs, x: np.ndarray) -> np.ndarray:
        return x.copy()


@register
class DtypeConverter(Unary):
    """y = x; marks a precision boundary of a hybrid-quantized graph (NAME.quantize.json): the tensor
    changes from ``from_precision`` to ``to_precision`` (e.g. asymmetric_affine-u8 → float32) here."""

    name = "DtypeConverter"

    @dataclass(frozen=True)
    class Attrs:
        from_precision: str = ""
        to_precision: str = ""

    @staticmethod
    def fn(attrs, x: np.ndarray) -> np.ndarray:
        return x.copy()
