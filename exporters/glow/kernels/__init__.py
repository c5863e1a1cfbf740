"""The LLVM kernels, by family: reference/ (portable float), integer/ (portable integer), fused/ (groups),
x86/ and cortex_m/ (ISA-specific paths). Importing this package registers every implementation
(kernels/strategy.py); only the select stage (exporters/glow/schedule/select.py) and the passes that ask it
import it whole."""

from pegasus.exporters.glow.kernels import registry  # noqa: F401
from pegasus.exporters.glow.kernels.cortex_m import (  # noqa: F401  (each import registers its kernels)
    integer_depthwise_dsp,
    integer_halves,
    integer_matmul_dsp,
    integer_pointwise_dsp,
    integer_pooled_pair,
    integer_smlad,
    integer_smlad_tile,
)
from pegasus.exporters.glow.kernels.fused import (  # noqa: F401  (each import registers its kernels)
    conv_pool,
    integer_conv_pool,
)
from pegasus.exporters.glow.kernels.integer import (  # noqa: F401  (each import registers its kernels)
    integer_conv,
    integer_conv_plan,
    integer_depthwise,
    integer_dot,
    integer_elementwise,
    integer_flavours,
    integer_im2col,
    integer_im2col_rows,
    integer_lut,
    integer_matmul,
    integer_pool,
    integer_prelu,
    integer_resize,
    integer_sum,
    quantize_linear,
)
from pegasus.exporters.glow.kernels.reference import (  # noqa: F401  (each import registers its kernels)
    binary,
    conv,
    conv_channels_last,
    conv_first,
    conv_plane,
    elementwise,
    epilogue,
    identity,
    linear,
    normalization,
    pool,
    pool_channels_last,
    pool_plane,
    reduce,
    resize,
    rnn,
    shape_ops,
)
from pegasus.exporters.glow.kernels.x86 import (  # noqa: F401  (each import registers its kernels)
    conv_im2col,
    conv_lanes,
    integer_madd,
    integer_matmul_madd,
)
