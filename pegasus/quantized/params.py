"""What a NAME.quantize file says, as plain data: each tensor's quantization and the layers a user
raised to another precision. ``pegasus.quantizers.quantize_file`` reads and writes it; the integer
lowering, inference and the exporters only read these objects.

Spellings follow the Acuity .quantize file users know: ``qtype`` u8/i8/i16/i32/bf16/float32,
``dtype`` asymmetric_quantized / symmetric_quantized / dynamic_fixed_point / qbfloat16 / float32,
``method`` layer (per tensor) or channel (per output channel, along ``axis``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: qtype spelling → NumPy integer type.
QTYPE_DTYPES = {"u8": "uint8", "i8": "int8", "i16": "int16", "i32": "int32"}
FLOAT_QTYPES = ("float32", "bf16")
#: Precisions a user may give a layer in customized_quantize_layers.
CUSTOM_PRECISIONS = ("float32", "dynamic_fixed_point-i16")


@dataclass
class TensorQuant:
    """One tensor's quantization: real = scale * (q - zero_point), per tensor or per channel."""

    qtype: str
    dtype: str
    method: str = "layer"
    min_value: list[float] = field(default_factory=list)
    max_value: list[float] = field(default_factory=list)
    scale: list[float] = field(default_factory=list)
    zero_point: list[int] = field(default_factory=list)
    fl: int | None = None
    axis: int | None = None

    @property
    def is_integer(self) -> bool:
        return self.qtype in QTYPE_DTYPES

    @property
    def numpy_dtype(self) -> str:
        return QTYPE_DTYPES[self.qtype]

    @property
    def per_channel(self) -> bool:
        return self.method == "channel"

    def scales(self) -> np.ndarray:
        return np.asarray(self.scale, dtype=np.float64)

    def zero_points(self) -> np.ndarray:
        return np.asarray(self.zero_point, dtype=np.int64)

    @property
    def precision(self) -> str:
        """Short name of the scheme, e.g. asymmetric_quantized-u8 (shown in converters and reports)."""
        return self.qtype if self.qtype == "float32" else f"{self.dtype}-{self.qtype}"


@dataclass
class QuantTable:
    """Everything in a .quantize file."""

    quantizer: str
    qtype: str
    algorithm: str
    graph_digest: str
    tensors: dict[str, TensorQuant] = field(default_factory=dict)
    customized_layers: dict[str, str] = field(default_factory=dict)
    layer_digests: dict[str, str] = field(default_factory=dict)
    path: str | None = None
    #: the model without dtype_converter layers (NAME.json) a hybrid table derives from; "" = graph_digest's
    float_graph_digest: str = ""
    #: the integer arithmetic of every op (pegasus.ops.fixedpoint.ROUNDINGS): half_up (pegasus's own) or
    #: tflite (TFLite's reference kernels, for a model TFLite quantized)
    rounding: str = "half_up"

    def get(self, tensor: str) -> TensorQuant | None:
        return self.tensors.get(tensor)
