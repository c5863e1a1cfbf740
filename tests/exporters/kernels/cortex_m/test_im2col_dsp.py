"""The SMLAD paths of im2col QConv on Cortex-M (integer_im2col.py, integer_smlad.py): first layers of fewer than
four input channels, whose taps a paired layer stores reordered (integer_conv_plan.stored_taps: each row of the
window along its last axis as whole words, the rows' last taps after them, zeros to whole groups), windows
crossing the padding on every side, strides, odd channel and position counts (2 x 1 and 1 x 2 blocks), long
reductions (the looped LDM groups), and weights stored doubled (TFLite rounding: the sums are 2 Σ, requantised
as such from the blocks' table of doubled biases and parameters that replaces the biases — with the rounding's
constant folded under a fused ReLU — or halved back where a bias near 2**30 could overflow them; half_up
rounding stores them as they are).
Every bundle against the reference interpreter bit for bit on Cortex-M0 (no DSP: bytes), M4, M7, M33 and M55,
and the stored order against the taps written out here."""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.exporters.glow.kernels.integer.integer_conv_plan import stored_taps
from tests.support.bundle_cases import Case
from tests.support.paired_weights import assert_bundle_matches

RNG = np.random.default_rng(17)


def conv(name: str, channels: int, outputs: int, kernel: tuple[int, int], size: tuple[int, int],
         stride: int = 1, pads: tuple[int, int, int, int] = (0, 0, 0, 0), unsigned: bool = False,
         relu: bool = False, dilation: int = 1, rounding: str = "tflite", big_bias: bool = False) -> Case:
    dtype = np.uint8 if unsigned else np.int8
    lo, hi = (0, 255) if unsigned else (-128, 127)
    x = RNG.integers(lo, hi, (1, *size, channels), endpoint=True).astype(dtype)
    w = RNG.integers(lo, hi, (outputs, channels, *kernel), endpoint=True).astype(dtype)
    bias = RNG.integers(-5000, 5000, outputs).astype(np.int32)
    if big_bias:    # |acc + bias| may pass 2**30: the doubled sums of doubled weights are halved back
        bias[0] = (1 << 30) - 7
    depth = channels * kernel[0] * kernel[1]
    attrs = {"multiplier": tuple(int(v) for v in RNG.integers(1 << 29, 1 << 31, outputs)),
             "shift": tuple(int(v) for v in 37 + depth.bit_length() // 2 + RNG.integers(0, 2, outputs)),
             "out_zero_point": 5 if unsigned else -4, "out_dtype": "uint8" if unsigned else "int8",
             "rounding": rounding, "channels_last": True, "pads": pads, "strides": (stride, stride),
             "dilations": (dilation, dilation), "x_zero_point": 120 if unsigned else -7,
             "w_zero_point": 131 if unsigned else 0, **({"lo": 5 if unsigned else -4} if relu else {})}
    return Case(name, "QConv", [x, w, bias], attrs, constant=(1, 2))


CASES = [
    conv("3ch-3x3-s2-same", 3, 8, (3, 3), (11, 12), stride=2, pads=(0, 0, 1, 1), relu=True),   # VWW's first
    conv("3ch-3x3-pad1", 3, 5, (3, 3), (7, 6), pads=(1, 1, 1, 1)),          # ResNet's first; odd M
    conv("1ch-10x4-s2", 1, 6, (10, 4), (19, 10), stride=2, pads=(4, 1, 5, 1), relu=True),   # DS-CNN's first
    conv("6ch-3x3-pad1-uint8", 6, 4, (3, 3), (5, 5), pads=(1, 1, 1, 1), unsigned=True),    # 54 taps + 2 zeros
    conv("5ch-1x1", 5, 3, (1, 1), (3, 5)),                                   # 15 positions: a lone last one
    conv("2ch-1x3-pad", 2, 2, (1, 3), (4, 4), pads=(0, 1, 0, 1)),           # rows of 6: a word and 2 taps
    conv("3ch-3x3-dilated", 3, 4, (3, 3), (7, 7), dilation=2),              # taps not contiguous: bytes
    conv("16ch-3x3-pad1-s2", 16, 6, (3, 3), (9, 7), stride=2, pads=(1, 1, 1, 1)),   # border taps by words
    conv("32ch-3x3-pad1", 32, 4, (3, 3), (4, 5), pads=(1, 1, 1, 1), relu=True),     # 72 groups: looped
    conv("8ch-1x1-uint8", 8, 7, (1, 1), (3, 3), unsigned=True),
    conv("8ch-3x3-big-bias", 8, 4, (3, 3), (5, 4), pads=(1, 1, 1, 1), big_bias=True),
    conv("4ch-3x3-half-up", 4, 4, (3, 3), (5, 4), pads=(1, 1, 1, 1), rounding="half_up"),    # not doubled
]


def test_stored_taps():
    """Rows of the window along its last axis give their whole words first, their last taps after, then zeros:
    a 3x3 kernel of 3 channels (rows of 9 taps) as taps 0-7, 9-16, 18-25, then 8, 17, 26 and one zero; with a
    multiple of four channels, or rows of whole words, the natural order."""
    assert stored_taps((3, 3), 1, 3) == (*range(8), *range(9, 17), *range(18, 26), 8, 17, 26, None)
    assert stored_taps((10, 4), 1, 1) == tuple(range(40))
    assert stored_taps((3, 3), 1, 16) == tuple(range(144))
    assert stored_taps((1, 3), 1, 2) == (0, 1, 2, 3, 4, 5, None, None)


@pytest.mark.parametrize("cpu", ["cortex-m4", "cortex-m7", "cortex-m33", "cortex-m55", "cortex-m0"])
def test_bundles_on_cortex_m(cpu, tmp_path):
    assert_bundle_matches(CASES, cpu, tmp_path)
