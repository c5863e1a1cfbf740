"""Reads model input samples from files: .npy, .pb (ONNX TensorProto), .tensor (text, one value per
line) and images (PNG/JPEG/BMP through Pillow, preprocessed as the input meta says).

Also reads dataset files (one sample per line, several inputs per line separated by spaces, paths
relative to the dataset file), reporting a missing sample with its file and line number.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pegasus.errors import PegasusError
from pegasus.fileio import require_file
from pegasus.ir.tensor import TensorType
from pegasus.runtime.inputmeta import PortMeta

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp"}
TENSOR_SUFFIXES = {".npy", ".pb", ".tensor", ".txt"}


def read_tensor_file(path: Path) -> np.ndarray:
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            return np.load(path, allow_pickle=False)  # model inputs are data: never unpickle
        if suffix == ".pb":
            import onnx
            from onnx import numpy_helper

            proto = onnx.TensorProto()
            proto.ParseFromString(path.read_bytes())
            return numpy_helper.to_array(proto)
        return np.loadtxt(path, dtype=np.float64, ndmin=1)
    except PegasusError:
        raise
    except Exception as exc:
        raise PegasusError(f"cannot read tensor ({type(exc).__name__}: {exc})", where=str(path)) from exc


def read_image(path: Path, ttype: TensorType, port: PortMeta) -> np.ndarray:
    """Load an image and preprocess it into ``ttype``: resize, channel order, (x - mean) * scale, layout."""
    from PIL import Image, UnidentifiedImageError

    shape = ttype.shape
    if len(shape) != 4:
        raise PegasusError(f"image given for input '{port.name}' of shape {list(shape)}; images need a 4-D "
                           "input (nchw or nhwc)", where=str(path))
    channels, height, width = (shape[1], shape[2], shape[3]) if port.layout == "nchw" else shape[3:] + shape[1:3]
    try:
        image = Image.open(path)
        image.load()
    except (UnidentifiedImageError, OSError) as exc:
        raise PegasusError(f"cannot read image: {exc}", where=str(path)) from exc
    if channels not in (1, 3, 4):
        raise PegasusError(f"input '{port.name}' has {channels} channels; images give 1, 3 or 4", where=str(path))
    image = image.convert({1: "L", 3: "RGB", 4: "RGBA"}[channels])
    if image.size != (width, height):
        if not port.resize:
            raise PegasusError(f"image is {image.size[0]}x{image.size[1]} but input '{port.name}' takes "
                               f"{width}x{height}; resize it or set preprocess.resize: true", where=str(path))
        image = image.resize((width, height), Image.BILINEAR)
    pixels = np.asarray(image, dtype=np.float32).reshape(height, width, channels)
    if port.reverse_channel:
        pixels = pixels[..., ::-1]
    mean = np.asarray(port.mean, dtype=np.float32)
    scale = np.asarray(port.scale, dtype=np.float32)
    for what, values in (("mean", mean), ("scale", scale)):
        if values.size not in (1, channels):
            raise PegasusError(f"input '{port.name}': {values.size} {what} values for {channels} channels")
    pixels = (pixels - mean) * scale
    if port.layout == "nchw":
        pixels = pixels.transpose(2, 0, 1)
    return pixels[None].astype(ttype.dtype.numpy)


def read_sample(path: str | Path, ttype: TensorType, port: PortMeta | None, name: str) -> np.ndarray:
    """One input tensor from a file, shaped as ``ttype``."""
    path = require_file(path, f"input file for '{name}'")
    if path.suffix.lower() in IMAGE_SUFFIXES:
        if port is None:
            port = PortMeta(name=name, shape=list(ttype.shape))
        return read_image(path, ttype, port)
    value = read_tensor_file(path)
    if value.size != ttype.size:
        raise PegasusError(f"has {value.size} values but input '{name}' needs {ttype.size} "
                           f"(shape {list(ttype.shape)})", where=str(path))
    return value.reshape(ttype.shape).astype(ttype.dtype.numpy)


def read_dataset(path: str | Path, inputs_per_line: int) -> list[list[Path]]:
    """Sample paths from a dataset file: each line names one file per model input."""
    path = require_file(path, "dataset file")
    samples = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != inputs_per_line:
            raise PegasusError(f"line {number}: {len(parts)} file(s) for {inputs_per_line} model input(s)",
                               where=str(path))
        files = [(path.parent / part) for part in parts]
        for file in files:
            if not file.is_file():
                raise PegasusError(f"line {number}: sample file not found: {file}", where=str(path))
        samples.append(files)
    if not samples:
        raise PegasusError("dataset file lists no samples", where=str(path))
    return samples
