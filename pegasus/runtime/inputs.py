"""Reads model input samples from files: .npy, .pb (ONNX TensorProto), .tensor (text, one value per
line) and images (PNG/JPEG/BMP through Pillow, preprocessed as the input meta says).

Also reads dataset files (one sample per line, several inputs per line separated by spaces, paths
relative to the dataset file), reporting a missing sample with its file and line number, and checks
samples cheaply (image headers, tensor sizes) so ``generate inputmeta`` can vet a dataset before writing.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np

from pegasus import limits
from pegasus.errors import PegasusError
from pegasus.fileio import require_file
from pegasus.ir.tensor import TensorType
from pegasus.runtime.inputmeta import IMAGE_CHANNELS, PortMeta, default_port

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp"}
TENSOR_SUFFIXES = {".npy", ".pb", ".tensor", ".txt"}


def read_npy(path: Path) -> np.ndarray:
    """A .npy file, its header's shape held to the tensor budget and to the bytes in the file before NumPy
    allocates the array; never unpickled (model inputs are data)."""
    with open(path, "rb") as handle:
        version = np.lib.format.read_magic(handle)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, _, dtype = read_header(handle)
        size = os.fstat(handle.fileno()).st_size - handle.tell()
    if dtype.hasobject:
        raise PegasusError("holds Python objects, not numbers", where=str(path))
    nbytes = limits.check_tensor(shape, dtype.itemsize, "sample", str(path))
    limits.check_present(nbytes, size, "sample", str(path))
    return np.load(path, allow_pickle=False)


def read_tensor_file(path: Path) -> np.ndarray:
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            return read_npy(path)
        if suffix == ".pb":  # an ONNX TensorProto; its external data only from inside the sample's folder
            from pegasus.importers.onnx.tensor_data import read_tensor_file as read_tensor_proto

            return read_tensor_proto(path, path.read_bytes())
        return np.loadtxt(path, dtype=np.float64, ndmin=1)
    except PegasusError:
        raise
    except Exception as exc:
        raise PegasusError(f"cannot read tensor ({type(exc).__name__}: {exc})", where=str(path)) from exc


def image_geometry(ttype: TensorType, port: PortMeta, path: Path) -> tuple[int, int, int]:
    """(channels, height, width) an image must be brought to for this input, or a clear error."""
    shape = list(ttype.shape)
    if len(shape) != 4:
        raise PegasusError(f"image given for input '{port.name}' of shape {shape}; images need a 4-D input "
                           "(nchw or nhwc): give .npy/.pb/.tensor files for it instead", where=str(path))
    channels, height, width = (shape[1], shape[2], shape[3]) if port.layout == "nchw" else (shape[3], *shape[1:3])
    if channels not in IMAGE_CHANNELS:
        raise PegasusError(f"image given for input '{port.name}' of shape {shape} ({port.layout}), which has "
                           f"{channels} channels; an image gives 1, 3 or 4: give .npy/.pb/.tensor files for it "
                           "instead, or fix the port's layout", where=str(path))
    for what, values in (("mean", port.mean), ("scale", port.scale)):
        if len(values) not in (1, channels):
            raise PegasusError(f"input '{port.name}': {len(values)} {what} values for {channels} channels",
                               where=str(path))
    return channels, height, width


def open_image(path: Path):
    """Open an image lazily (header only); pixels are decoded on first use."""
    from PIL import Image

    try:
        with warnings.catch_warnings():  # Pillow warns of a large image on stderr: a one-line error here instead
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            return Image.open(path)
    except _image_errors() as exc:
        raise PegasusError(f"cannot read image: {_first_line(exc)}", where=str(path)) from None


def _image_errors() -> tuple[type[Exception], ...]:
    """What Pillow raises for a damaged image: OSError (truncated, unidentified), SyntaxError (a broken PNG
    chunk), ValueError, EOFError, and DecompressionBombError (a header declaring billions of pixels)."""
    from PIL import Image

    return OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError, Image.DecompressionBombWarning


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def check_image_size(image, width: int, height: int, port: PortMeta, path: Path) -> None:
    if image.size != (width, height) and not port.resize:
        raise PegasusError(f"image is {image.size[0]}x{image.size[1]} but input '{port.name}' takes "
                           f"{width}x{height}; resize the image or set preprocess.resize: true", where=str(path))


def read_image(path: Path, ttype: TensorType, port: PortMeta) -> np.ndarray:
    """Load an image and preprocess it into ``ttype``: resize, channel order, (x - mean) * scale, layout."""
    from PIL import Image

    channels, height, width = image_geometry(ttype, port, path)
    image = open_image(path)
    check_image_size(image, width, height, port, path)
    # the header's size, held to the budget before the pixels are decoded (Pillow's own bomb limit is 2^28)
    limits.check_tensor([image.size[1], image.size[0], 4], 4, "image", str(path))
    try:
        image = image.convert({1: "L", 3: "RGB", 4: "RGBA"}[channels])
    except _image_errors() as exc:  # truncated or corrupt pixel data shows up when decoding
        raise PegasusError(f"cannot read image: {_first_line(exc)}", where=str(path)) from None
    if image.size != (width, height):
        image = image.resize((width, height), Image.BILINEAR)
    pixels = np.asarray(image, dtype=np.float32).reshape(height, width, channels)
    if port.reverse_channel:
        pixels = pixels[..., ::-1]
    pixels = (pixels - np.asarray(port.mean, dtype=np.float32)) * np.asarray(port.scale, dtype=np.float32)
    if port.layout == "nchw":
        pixels = pixels.transpose(2, 0, 1)
    return pixels[None].astype(ttype.dtype.numpy)


def check_tensor(value: np.ndarray, ttype: TensorType, name: str, path: Path) -> None:
    if value.size != ttype.size:
        raise PegasusError(f"has {value.size} values but input '{name}' needs {ttype.size} "
                           f"(shape {list(ttype.shape)})", where=str(path))


def read_sample(path: str | Path, ttype: TensorType, port: PortMeta | None, name: str) -> np.ndarray:
    """One input tensor from a file, shaped as ``ttype``."""
    path = require_file(path, f"input file for '{name}'")
    if path.suffix.lower() in IMAGE_SUFFIXES:
        return read_image(path, ttype, port or default_port(name, list(ttype.shape), ttype.dtype.value))
    value = read_tensor_file(path)
    check_tensor(value, ttype, name, path)
    return value.reshape(ttype.shape).astype(ttype.dtype.numpy)


def check_sample(path: Path, ttype: TensorType, port: PortMeta | None, name: str) -> None:
    """Fail as ``read_sample`` would, but cheaply: images are checked from their header only."""
    path = require_file(path, f"input file for '{name}'")
    if path.suffix.lower() in IMAGE_SUFFIXES:
        port = port or default_port(name, list(ttype.shape), ttype.dtype.value)
        _, height, width = image_geometry(ttype, port, path)
        with open_image(path) as image:
            check_image_size(image, width, height, port, path)
    else:
        check_tensor(read_tensor_file(path), ttype, name, path)


def dataset_lines(path: str | Path, inputs_per_line: int) -> list[tuple[int, list[Path]]]:
    """(line number, one file per model input) for each sample of a dataset file.

    Blank lines and lines starting with '#' are skipped; paths are relative to the dataset file.
    """
    path = require_file(path, "dataset file")
    try:
        text = path.read_text()
    except UnicodeDecodeError as exc:
        raise PegasusError("not a text file (a dataset file lists one sample per line)", where=str(path)) from exc
    samples = []
    for number, line in enumerate(text.splitlines(), start=1):
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
        samples.append((number, files))
    if not samples:
        raise PegasusError("dataset file lists no samples", where=str(path))
    return samples


def read_dataset(path: str | Path, inputs_per_line: int) -> list[list[Path]]:
    """Sample paths from a dataset file: each line names one file per model input."""
    return [files for _, files in dataset_lines(path, inputs_per_line)]
