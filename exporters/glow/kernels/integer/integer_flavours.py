"""Flavours: the ISA-specific pieces the portable integer kernels call, registered by the x86 and Cortex-M modules
and looked up by name, so that an integer module never imports an ISA module (issue 29: reference/ and integer/
never import x86/ or cortex_m/; the package's ``__init__`` imports them all, which registers them).

What a portable kernel calls is decided before it runs: the select stage's choice and the layer's ``ConvPlan``
(integer_conv_plan.py: ``dual`` for SMLAD, ``madd`` for PMADDWD lanes) name the flavour; the kernel only looks it
up. The flavours (name: registered by, what it is):

- ``madd.lanes`` (integer_madd.py): the 16-bit lanes of the widest PMADDWD of a target, 0 when it has none;
- ``madd.dot`` (integer_madd.py), ``smlad.dot`` (integer_smlad.py): the dot products of the im2col kernel's
  blocks (integer_im2col.py ``_Im2colConv.dot``);
- ``smlad.tile`` (integer_smlad_tile.py): every block of a tile of a layer with a ``tile_stream``;
- ``halves.fits``, ``halves.pack`` (integer_halves.py): whether a dense layer's 8-bit weights can be halfword
  pairs of rows for SMLAD, and those halfwords (integer_conv_weights.dense_halves);
- ``smlad.pointwise`` (integer_pointwise_dsp.py): the kernel of a 1x1 layer of 4 or 8 channels whose biases were
  replaced by its ``pointwise_records`` (integer_conv_plan.pointwise_layout): its inputs held in registers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: the registered flavours by name (tests may replace one with ``monkeypatch.setitem``)
FLAVOURS: dict[str, Callable[..., Any]] = {}


def flavour(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as flavour ``name`` (a second registration of a name is refused)."""
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in FLAVOURS:
            raise ValueError(f"flavour {name} registered twice")
        FLAVOURS[name] = fn
        return fn
    return decorate


def flavour_of(name: str) -> Callable[..., Any]:
    """The function registered as flavour ``name`` (the kernels must be registered: ``import
    pegasus.exporters.glow.kernels``)."""
    try:
        return FLAVOURS[name]
    except KeyError:
        raise KeyError(f"no flavour {name} registered (import pegasus.exporters.glow.kernels)") from None
