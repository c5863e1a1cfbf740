"""Input samples (``inference --input``, dataset files): .npy headers and data, ONNX TensorProto .pb files
(dims, data type, external data), .tensor text and images (PNG/JPEG/BMP headers and pixels), read by
``pegasus.runtime.inputs.read_sample`` for a float32 input of shape [1, 3, 8, 8] (images resized to it)."""

from __future__ import annotations

from pathlib import Path

from fuzz.targets import target


@target("samples")
def read_input_sample(path: Path, scratch: Path) -> None:
    from pegasus.ir.dtypes import DType
    from pegasus.ir.tensor import TensorType
    from pegasus.runtime.inputs import check_sample, read_sample

    ttype = TensorType((1, 3, 8, 8), DType("float32"))
    check_sample(path, ttype, None, "x")
    read_sample(path, ttype, None, "x")
