"""Turns an integer kernel case into its channels-last form (the input transposed, the op told so)."""

from __future__ import annotations

import numpy as np

from tests.support.bundle_cases import Case


def last(case: Case) -> Case:
    """``case`` with its activation input channels last (the output follows)."""
    x = np.ascontiguousarray(np.moveaxis(case.inputs[0], 1, -1))
    return Case(f"last-{case.id}", case.op, [x, *case.inputs[1:]], {**case.attrs, "channels_last": True},
                constant=case.constant)
