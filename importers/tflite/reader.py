"""Reads a ``.tflite`` flatbuffer as data: tensors (name, shape, dtype, bytes, quantization) and operators
(as ``SourceNode``s with their options decoded to plain values), without running anything from the file.

The flatbuffer is parsed with the ``tflite`` package (the schema's generated accessors). Options are
decoded generically: each builtin's options table is read through its accessors and stored under
snake_case keys (``stride_w``, ``fused_activation_function``...), enum values as their names
(``padding: SAME``), so converters read ``node.attrs["padding"]`` and a newer schema's extra fields
only add keys. Tensor names are kept as the file has them (what Netron shows); a node is named after
its first output tensor, and ``where`` says its operator index. A sparse constant keeps its stored values
and its sparsity metadata (traversal order, block map, per-dimension DENSE/SPARSE_CSR metadata) as data;
the loader densifies it (sparsity.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pegasus.errors import PegasusError
from pegasus.fileio import read_model_input
from pegasus.importers.common.converters import NodeAttrs, SourceNode
from pegasus.limits import check_tensor, element_count

try:
    import tflite
except ImportError:  # pragma: no cover - depends on the installed extras
    tflite = None

IDENTIFIER = b"TFL3"

#: TensorType enum value -> numpy dtype name (those pegasus can hold; others are refused by name)
_DTYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 7: "int16", 9: "int8",
           10: "float64", 12: "uint64", 15: "uint32", 16: "uint16"}
_DTYPE_NAMES = {0: "FLOAT32", 1: "FLOAT16", 2: "INT32", 3: "UINT8", 4: "INT64", 5: "STRING", 6: "BOOL", 7: "INT16",
                8: "COMPLEX64", 9: "INT8", 10: "FLOAT64", 11: "COMPLEX128", 12: "UINT64", 13: "RESOURCE",
                14: "VARIANT", 15: "UINT32", 16: "UINT16", 17: "INT4"}

#: option fields whose integer values are enums, with the enum class that names them
_ENUM_FIELDS = {"padding": "Padding", "fused_activation_function": "ActivationFunctionType",
                "mode": "MirrorPadMode", "weights_format": "FullyConnectedOptionsWeightsFormat",
                "kernel_type": "LSHProjectionType", "combiner": "CombinerType", "in_data_type": "TensorType",
                "out_data_type": "TensorType", "output_type": "TensorType", "quantized_bias_type": "TensorType",
                "idx_out_type": "TensorType"}


@dataclass(frozen=True)
class DimensionMetadata:
    """One traversal dimension of a sparse tensor: DENSE (``dense_size`` entries) or SPARSE_CSR (for each
    position of the dimensions before it, the entries ``array_indices[array_segments[p]:array_segments[p+1]]``)."""

    format: str
    dense_size: int = 0
    array_segments: np.ndarray | None = None
    array_indices: np.ndarray | None = None


@dataclass(frozen=True)
class Sparsity:
    """TFLite's sparsity metadata: the dimensions in ``traversal_order`` (the tensor's own, then one per
    block dimension), the tensor dimension each block dimension splits (``block_map``), and per traversal
    dimension its ``dim_metadata``."""

    traversal_order: tuple[int, ...]
    block_map: tuple[int, ...]
    dim_metadata: tuple[DimensionMetadata, ...]


@dataclass
class TfliteTensor:
    """One tensor of the subgraph: ``data`` is set for constants (buffers with bytes)."""

    index: int
    name: str
    shape: tuple[int, ...]
    signature: tuple[int, ...]      # -1 marks a dynamic dimension (the batch, usually)
    dtype: str
    data: np.ndarray | None = None
    scale: np.ndarray | None = None
    zero_point: np.ndarray | None = None
    axis: int = 0
    is_variable: bool = False
    sparsity: Sparsity | None = None   # set for sparse constants: ``data`` then holds the stored values only

    @property
    def quantized(self) -> bool:
        return self.scale is not None and self.scale.size > 0

    @property
    def sparse(self) -> bool:
        return self.sparsity is not None


@dataclass
class TfliteSubgraph:
    name: str
    tensors: list[TfliteTensor]
    nodes: list[SourceNode]
    inputs: list[str]
    outputs: list[str]
    subgraph_count: int = 1
    description: str = ""
    notes: list[str] = field(default_factory=list)


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def _enum_names(enum_class: str) -> dict[int, str]:
    cls = getattr(tflite, enum_class, None)
    if cls is None:
        return {}
    return {v: k for k, v in vars(cls).items() if not k.startswith("_") and isinstance(v, int)}


def decode_table(table) -> dict[str, object]:
    """Every scalar and vector field of a flatbuffer options table, as snake_case keys."""
    values: dict[str, object] = {}
    methods = {name for name in dir(table) if not name.startswith("_")}
    for name in sorted(methods):
        if (name in ("Init",) or name.startswith("GetRootAs") or name.endswith(("AsNumpy", "Length", "IsNone"))
                or name.endswith("BufferHasIdentifier")):
            continue
        key = _snake(name)
        if f"{name}Length" in methods:
            length = getattr(table, f"{name}Length")()
            values[key] = [int(v) if isinstance(v, (int, np.integer)) else v
                           for v in (getattr(table, name)(j) for j in range(length))]
            continue
        try:
            value = getattr(table, name)()
        except TypeError:  # an accessor that needs arguments (a nested table): not an option we read
            continue
        if isinstance(value, (bool, int, float, np.integer, np.floating)):
            value = value.item() if isinstance(value, np.generic) else value
            names = _enum_names(_ENUM_FIELDS[key]) if key in _ENUM_FIELDS else None
            values[key] = names.get(value, value) if names else value
        elif isinstance(value, bytes):
            values[key] = value.decode(errors="replace")
    return values


def _options(op) -> dict[str, object]:
    kind = op.BuiltinOptionsType()
    if not kind:
        return {}
    names = _enum_names("BuiltinOptions")
    cls = getattr(tflite, names.get(kind, ""), None)
    table = op.BuiltinOptions()
    if cls is None or table is None:
        return {}
    options = cls()
    options.Init(table.Bytes, table.Pos)
    return decode_table(options)


def _index_vector(metadata, kind: str) -> np.ndarray | None:
    """A DimensionMetadata's array_segments/array_indices union (Int32/Uint16/Uint8 vector) as int64."""
    vector_type = getattr(metadata, f"{kind}Type")()
    table = getattr(metadata, kind)()
    cls = getattr(tflite, _enum_names("SparseIndexVector").get(vector_type, ""), None)
    if cls is None or table is None:
        return None
    vector = cls()
    vector.Init(table.Bytes, table.Pos)
    return vector.ValuesAsNumpy().astype(np.int64) if vector.ValuesLength() else np.zeros(0, np.int64)


def _sparsity(params) -> Sparsity:
    formats = _enum_names("DimensionType")
    dims = []
    for i in range(params.DimMetadataLength()):
        meta = params.DimMetadata(i)
        dims.append(DimensionMetadata(formats.get(meta.Format(), str(meta.Format())), int(meta.DenseSize()),
                                      _index_vector(meta, "ArraySegments"), _index_vector(meta, "ArrayIndices")))
    order = tuple(int(v) for v in params.TraversalOrderAsNumpy()) if params.TraversalOrderLength() else ()
    block_map = tuple(int(v) for v in params.BlockMapAsNumpy()) if params.BlockMapLength() else ()
    return Sparsity(order, block_map, tuple(dims))


def _check_bytes(buf: bytes, path: Path) -> None:
    if len(buf) < 8:
        raise PegasusError(f"not a TFLite model ({len(buf)} bytes; the file is empty or truncated)", where=str(path))
    if buf[4:8] != IDENTIFIER:
        hint = " (it looks like an ONNX model: use 'pegasus import onnx')" if buf[:1] == b"\x08" else ""
        raise PegasusError(f"not a TFLite model: the flatbuffer identifier is {buf[4:8]!r}, expected "
                           f"{IDENTIFIER!r}{hint}", where=str(path))


def _buffer_bytes(model, index: int, buf: bytes, path: Path) -> bytes | None:
    if index <= 0 or index >= model.BuffersLength():
        return None
    buffer = model.Buffers(index)
    offset = buffer.Offset() if hasattr(buffer, "Offset") else 0
    if offset > 1:  # large models keep buffers after the flatbuffer
        size = buffer.Size()
        if offset + size > len(buf):
            raise PegasusError(f"buffer {index} lies beyond the end of the file (truncated?)", where=str(path))
        return buf[offset:offset + size]
    if buffer.DataLength() == 0:
        return None
    return buffer.DataAsNumpy().tobytes()


def _tensor(model, sg, index: int, buf: bytes, path: Path) -> TfliteTensor:
    t = sg.Tensors(index)
    name = t.Name().decode(errors="replace") if t.Name() else f"tensor_{index}"
    kind = t.Type()
    if kind not in _DTYPES:
        raise PegasusError(f"tensor '{name}' has type {_DTYPE_NAMES.get(kind, kind)}, which pegasus cannot hold",
                           where=str(path))
    dtype = _DTYPES[kind]
    shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
    signature = tuple(int(d) for d in t.ShapeSignatureAsNumpy()) if t.ShapeSignatureLength() else shape
    sparsity = t.Sparsity()
    tensor = TfliteTensor(index, name, shape, signature, dtype, is_variable=bool(t.IsVariable()),
                          sparsity=None if sparsity is None else _sparsity(sparsity))
    itemsize = np.dtype(dtype).itemsize
    element_count(shape, f"tensor '{name}'", str(path))   # integers, none negative
    raw = _buffer_bytes(model, t.Buffer(), buf, path)
    if raw is not None or tensor.is_variable:  # what the import allocates (sparse ones: dense) held to the budget
        nbytes = check_tensor(shape, itemsize, f"tensor '{name}'", str(path))
    if raw is not None:
        if tensor.sparse and len(raw) % itemsize or not tensor.sparse and len(raw) != nbytes:
            raise PegasusError(f"tensor '{name}' {list(shape)} {dtype} needs {nbytes} bytes, its buffer "
                               f"holds {len(raw)}", where=str(path))
        values = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype)
        tensor.data = values if tensor.sparse else values.reshape(shape)  # sparse: densified at import
    q = t.Quantization()
    if q is not None and q.ScaleLength():
        tensor.scale = q.ScaleAsNumpy().astype(np.float32)
        tensor.zero_point = (q.ZeroPointAsNumpy().astype(np.int64) if q.ZeroPointLength()
                             else np.zeros(tensor.scale.size, np.int64))
        tensor.axis = int(q.QuantizedDimension())
        _check_quantization(tensor, path)
    return tensor


def _check_quantization(tensor: TfliteTensor, path: Path) -> None:
    """Scales positive and finite (a NaN or zero scale has no meaning and breaks every later step), one scale
    per channel of ``quantized_dimension`` (an axis of the tensor) or one for all, zero points as many and
    within the tensor's integer type."""
    what = f"tensor '{tensor.name}'"
    scale, zero = tensor.scale, tensor.zero_point
    bad = [float(s) for s in scale if not (np.isfinite(s) and s >= np.finfo(np.float32).tiny)]
    if bad:
        raise PegasusError(f"{what} has quantization scale {bad[0]}, which is not a positive finite number",
                           where=str(path))
    if scale.size > 1:
        rank = len(tensor.shape)
        if not 0 <= tensor.axis < rank:
            raise PegasusError(f"{what} {list(tensor.shape)}: quantized_dimension {tensor.axis} is not an axis of "
                               "the tensor", where=str(path))
        if tensor.shape[tensor.axis] != scale.size:
            raise PegasusError(f"{what} {list(tensor.shape)}: {scale.size} per-channel scales for "
                               f"{tensor.shape[tensor.axis]} channels (axis {tensor.axis})", where=str(path))
    if zero.size not in (1, scale.size):
        raise PegasusError(f"{what}: {zero.size} zero points for {scale.size} scales", where=str(path))
    if np.dtype(tensor.dtype).kind in "iu":
        info = np.iinfo(tensor.dtype)
        outside = [int(z) for z in zero if not info.min <= z <= info.max]
        if outside:
            raise PegasusError(f"{what}: zero point {outside[0]} lies outside {tensor.dtype}", where=str(path))


def _operator_name(model, op) -> tuple[str, str]:
    """(op type, domain): a builtin's name (CONV_2D), or a custom op's code in domain 'custom'."""
    code = model.OperatorCodes(op.OpcodeIndex())
    builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
    names = _enum_names("BuiltinOperator")
    name = names.get(builtin, f"BUILTIN_{builtin}")
    if name == "CUSTOM":
        custom = code.CustomCode()
        return (custom.decode(errors="replace") if custom else "CUSTOM"), "custom"
    return name, ""


def _unique_names(tensors: list[TfliteTensor]) -> None:
    """Tensors are referenced by index in the file, so two may share a name; pegasus needs unique ones."""
    counts: dict[str, int] = {}
    for tensor in tensors:
        counts[tensor.name] = counts.get(tensor.name, 0) + 1
    for tensor in tensors:
        if counts[tensor.name] > 1:
            tensor.name = f"{tensor.name}_{tensor.index}"


def read_tflite(path: str | Path, subgraph: int = 0) -> TfliteSubgraph:
    """Parse ``path`` and return subgraph ``subgraph`` with its tensors and operators."""
    if tflite is None:
        raise PegasusError("importing TFLite models needs the 'tflite' package: pip install 'pegasus-nn[tflite]'")
    path = Path(path)
    buf = read_model_input(path, "TFLite model", given=True)
    _check_bytes(buf, path)
    try:
        model = tflite.Model.GetRootAsModel(buf, 0)
        count = model.SubgraphsLength()
        if not 0 <= subgraph < count:
            raise PegasusError(f"--subgraph {subgraph}: the model has {count} subgraph(s) (0..{count - 1})",
                               where=str(path))
        sg = model.Subgraphs(subgraph)
        tensors = [_tensor(model, sg, i, buf, path) for i in range(sg.TensorsLength())]
        _unique_names(tensors)
        names = [t.name for t in tensors]
        nodes = []
        for i in range(sg.OperatorsLength()):
            op = sg.Operators(i)
            op_type, domain = _operator_name(model, op)
            inputs = [names[j] if j >= 0 else "" for j in (op.InputsAsNumpy() if op.InputsLength() else [])]
            outputs = [names[j] for j in (op.OutputsAsNumpy() if op.OutputsLength() else [])]
            node_name = outputs[0] if outputs else f"{op_type.lower()}_{i}"
            attrs = NodeAttrs(_options(op), f"{op_type} node '{node_name}', operator {i}")
            nodes.append(SourceNode(node_name, op_type, inputs, outputs, attrs, domain, f"operator {i}"))
        inputs = [names[j] for j in sg.InputsAsNumpy()] if sg.InputsLength() else []
        outputs = [names[j] for j in sg.OutputsAsNumpy()] if sg.OutputsLength() else []
        sg_name = sg.Name().decode(errors="replace") if sg.Name() else ""
        description = model.Description().decode(errors="replace") if model.Description() else ""
    except PegasusError:
        raise
    except Exception as exc:  # the flatbuffer accessors raise struct/index errors on corrupt bytes
        raise PegasusError(f"not a valid TFLite model ({type(exc).__name__}: {exc}; is the file truncated?)",
                           where=str(path)) from exc
    return TfliteSubgraph(sg_name, tensors, nodes, inputs, outputs, count, description)
