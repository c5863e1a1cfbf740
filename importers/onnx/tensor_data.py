"""ONNX tensors read as data: an initializer, a Constant's value or a ``.pb`` sample becomes an array only once
its declared dims have been held to the tensor budget and to the bytes actually there.

A TensorProto declares its dims apart from its data, so 136 bytes can declare 2^28 floats; and external
data names a file by a path the model's author chose. Every tensor therefore goes through
``tensor_to_array`` (dims vs budget vs data present, before NumPy allocates anything), and external data
through ``load_external_data``: the location is resolved against the folder of the file that names it (the
model, or the sample) and may not leave it — no absolute path, no ``..``, no symbolic link out of it, only
a regular file — and the declared offset and length must lie inside that file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from pegasus.errors import PegasusError
from pegasus.fileio import open_model_input
from pegasus.limits import check_present, check_tensor

#: 4-bit types: two elements per byte of raw data and per int32_data entry
_PACKED = {getattr(TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1") if hasattr(TensorProto, n)}
#: complex types: two float_data/double_data entries per element
_COMPLEX = {TensorProto.COMPLEX64, TensorProto.COMPLEX128}


def _describe(what: str, where: str | None) -> str:
    return f"{where}: {what}" if where else what


def _element_type(proto: TensorProto, what: str, where: str | None) -> np.dtype:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(proto.data_type))
    except (KeyError, ValueError, TypeError):
        raise PegasusError(f"{_describe(what, where)} has unknown data type {proto.data_type}") from None


def _held(proto: TensorProto, dtype: np.dtype, what: str, where: str | None) -> None:
    """Refuse a type pegasus has no tensors of (complex, strings, ...): a model's tensor or a sample."""
    from pegasus.ir.dtypes import DType

    try:
        DType.from_numpy(dtype)
    except TypeError:
        name = TensorProto.DataType.Name(proto.data_type) if proto.data_type in TensorProto.DataType.values() else dtype
        raise PegasusError(f"{_describe(what, where)} has data type {name}, which pegasus does not "
                           "hold") from None


def data_bytes(proto: TensorProto, what: str, where: str | None = None) -> int:
    """The bytes of raw data the tensor's dims and type call for, after holding them to the budget."""
    dtype = _element_type(proto, what, where)
    _held(proto, dtype, what, where)
    dims = list(proto.dims)
    nbytes = check_tensor(dims, dtype.itemsize, what, where)
    return (nbytes + 1) // 2 if proto.data_type in _PACKED else nbytes


def _elements_present(proto: TensorProto) -> int:
    """How many elements the typed data field (float_data, int32_data, ...) holds."""
    entries = len(getattr(proto, helper.tensor_dtype_to_field(proto.data_type)))
    if proto.data_type in _COMPLEX:
        return entries // 2
    return entries * 2 if proto.data_type in _PACKED else entries


def tensor_to_array(proto: TensorProto, what: str, where: str | None = None) -> np.ndarray:
    """The tensor as an array, refused with one line when its dims are over the budget or disagree with the
    data it holds (external data must have been read with ``load_external_data`` first)."""
    if proto.data_location == TensorProto.EXTERNAL:
        raise PegasusError(f"{_describe(what, where)} keeps its data in an external file that was not read")
    needed = data_bytes(proto, what, where)
    if proto.HasField("raw_data"):
        present = len(proto.raw_data)
        if present != needed:
            raise PegasusError(f"{_describe(what, where)} of dims {list(proto.dims)} "
                               f"({TensorProto.DataType.Name(proto.data_type)}) needs {needed} bytes of raw data "
                               f"but holds {present}")
    else:
        count = 1
        for dim in proto.dims:
            count *= int(dim)
        present = _elements_present(proto)
        if present != count:
            raise PegasusError(f"{_describe(what, where)} declares {count} values (dims {list(proto.dims)}) but "
                               f"holds {present}")
    try:
        return numpy_helper.to_array(proto)
    except (ValueError, TypeError, KeyError) as exc:
        raise PegasusError(f"{_describe(what, where)}: cannot read its data ({exc})") from None


def _location(folder: Path, location: str, what: str, where: str | None) -> Path:
    """The external data file ``location`` names, which must lie inside ``folder``."""
    parts = PurePosixPath(location).parts
    if (not location or "\0" in location or "\\" in location or PurePosixPath(location).is_absolute()
            or ".." in parts):
        raise PegasusError(f"{_describe(what, where)}: external data location {location!r} must be a relative path "
                           "inside the folder of the file that names it (no absolute path, no '..')")
    path = folder / location
    base = os.path.realpath(folder)
    if os.path.commonpath([os.path.realpath(path), base]) != base:
        raise PegasusError(f"{_describe(what, where)}: external data location {location!r} leads outside "
                           f"{folder} through a symbolic link")
    return path


def _int_field(info: dict[str, str], key: str, what: str, where: str | None) -> int | None:
    if key not in info:
        return None
    text = info[key]
    if not text.isdigit() or len(text) > 20:
        raise PegasusError(f"{_describe(what, where)}: external data {key} {text!r} is not a non-negative integer")
    return int(text)


def read_external(proto: TensorProto, folder: Path, what: str, where: str | None = None) -> None:
    """Read the external data of ``proto`` (from a file inside ``folder``) into its raw_data."""
    info = {entry.key: entry.value for entry in proto.external_data}
    path = _location(folder, info.get("location", ""), what, where)
    offset = _int_field(info, "offset", what, where) or 0
    length = _int_field(info, "length", what, where)
    needed = data_bytes(proto, what, where)
    if length is not None and length != needed:
        raise PegasusError(f"{_describe(what, where)} declares {needed} bytes but its external data length is "
                           f"{length}")
    with open_model_input(path, f"external data file of {what}") as handle:
        size = os.fstat(handle.fileno()).st_size
        check_present(offset + needed, size, f"{what} (external data at offset {offset} of {path.name})", where)
        handle.seek(offset)
        raw = handle.read(needed)
    check_present(needed, len(raw), what, where)
    proto.raw_data = raw
    del proto.external_data[:]
    proto.data_location = TensorProto.DEFAULT


def _graph_tensors(graph: onnx.GraphProto) -> Iterator[TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _graph_tensors(attr.g)
            for sub in attr.graphs:
                yield from _graph_tensors(sub)


def load_external_data(model: onnx.ModelProto, folder: Path, where: str | None = None) -> None:
    """Read every tensor's external data (initializers, attribute tensors, subgraphs) from inside ``folder``."""
    for proto in _graph_tensors(model.graph):
        if proto.data_location == TensorProto.EXTERNAL:
            read_external(proto, folder, f"tensor '{proto.name}'", where)


def read_tensor_file(path: Path, data: bytes) -> np.ndarray:
    """A ``.pb`` sample (one serialized TensorProto): external data from inside the sample's folder."""
    proto = TensorProto()
    try:
        proto.ParseFromString(data)
    except Exception as exc:  # protobuf raises DecodeError and others for bytes that are not a TensorProto
        raise PegasusError(f"not an ONNX TensorProto ({type(exc).__name__})", where=str(path)) from None
    what = f"tensor '{proto.name}'" if proto.name else "tensor"
    if proto.data_location == TensorProto.EXTERNAL:
        read_external(proto, path.parent, what, str(path))
    return tensor_to_array(proto, what, str(path))
