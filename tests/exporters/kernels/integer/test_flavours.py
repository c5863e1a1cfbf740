"""The flavours the ISA modules register for the portable integer kernels (exporters/glow/kernels/
integer_flavours.py): every name the kernels look up is registered once the kernels are imported, a second
registration of a name is refused and an unknown name says so."""

from __future__ import annotations

import pytest

import pegasus.exporters.glow.kernels  # noqa: F401  (registers the flavours)
from pegasus.exporters.glow.kernels.integer.integer_flavours import FLAVOURS, flavour, flavour_of

LOOKED_UP = ("madd.lanes", "madd.dot", "smlad.dot", "smlad.tile", "smlad.pointwise", "halves.fits", "halves.pack")


def test_every_flavour_the_kernels_look_up_is_registered():
    assert all(callable(flavour_of(name)) for name in LOOKED_UP)


def test_a_second_registration_is_refused():
    with pytest.raises(ValueError, match="registered twice"):
        flavour("smlad.dot")(lambda: None)
    assert FLAVOURS["smlad.dot"].__name__ == "dot_dual"


def test_an_unknown_flavour_says_so():
    with pytest.raises(KeyError, match="no flavour"):
        flavour_of("neon.dot")
