"""Writes and edits .tflite flatbuffers for the tests, through the schema's object API as ai-edge-litert
ships it (no TensorFlow import): small models of ops the TFLite converter does not emit from TF code
(RELU_0_TO_1, SOFTMAX with beta, L2_POOL_2D, UNIDIRECTIONAL_SEQUENCE_LSTM, QUANTIZE/DEQUANTIZE at a float
model's edges, a custom op), and edits of converted models (int8 weights made float for a reference)."""

from __future__ import annotations

from dataclasses import dataclass, field

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as fb

_TYPES = {"float32": fb.TensorType.FLOAT32, "float16": fb.TensorType.FLOAT16, "int32": fb.TensorType.INT32,
          "int64": fb.TensorType.INT64, "int8": fb.TensorType.INT8, "uint8": fb.TensorType.UINT8,
          "int16": fb.TensorType.INT16, "bool": fb.TensorType.BOOL}


def _options_type(options) -> int:
    """The BuiltinOptions union tag of an options object (``SoftmaxOptionsT`` -> SoftmaxOptions)."""
    return getattr(fb.BuiltinOptions, type(options).__name__[:-1])


@dataclass
class ModelBuilder:
    """One subgraph: tensors (constants carry data), operators, inputs and outputs."""

    tensors: list = field(default_factory=list)
    buffers: list = field(default_factory=lambda: [fb.BufferT()])
    operators: list = field(default_factory=list)
    codes: list = field(default_factory=list)

    def tensor(self, name: str, shape, dtype: str = "float32", data: np.ndarray | None = None,
               scale=None, zero_point=None, axis: int = 0, variable: bool = False) -> int:
        t = fb.TensorT()
        t.name, t.shape, t.type, t.isVariable = name, list(shape), _TYPES[dtype], variable
        t.buffer = 0
        if data is not None:
            buffer = fb.BufferT()
            buffer.data = np.frombuffer(np.ascontiguousarray(data, dtype=dtype).tobytes(), np.uint8)
            self.buffers.append(buffer)
            t.buffer = len(self.buffers) - 1
        if scale is not None:
            q = fb.QuantizationParametersT()
            q.scale = [float(s) for s in np.atleast_1d(scale)]
            q.zeroPoint = [int(z) for z in np.atleast_1d(zero_point if zero_point is not None else 0)]
            q.quantizedDimension = axis
            t.quantization = q
        self.tensors.append(t)
        return len(self.tensors) - 1

    def const(self, name: str, data: np.ndarray, dtype: str | None = None, **quant) -> int:
        data = np.asarray(data)
        return self.tensor(name, data.shape, dtype or str(data.dtype), data, **quant)

    def _code(self, op: str) -> int:
        custom = not hasattr(fb.BuiltinOperator, op)
        key = ("CUSTOM", op) if custom else (op, None)
        if key not in self.codes:
            self.codes.append(key)
        return self.codes.index(key)

    def op(self, op: str, inputs: list[int], outputs: list[int], options=None) -> None:
        """Append builtin ``op`` (a BuiltinOperator name) or, for any other name, a custom op of that name."""
        o = fb.OperatorT()
        o.opcodeIndex, o.inputs, o.outputs = self._code(op), list(inputs), list(outputs)
        if options is not None:
            o.builtinOptionsType, o.builtinOptions = _options_type(options), options
        self.operators.append(o)

    def build(self, inputs: list[int], outputs: list[int]) -> bytes:
        sub = fb.SubGraphT()
        sub.tensors, sub.operators, sub.inputs, sub.outputs, sub.name = (self.tensors, self.operators, list(inputs),
                                                                         list(outputs), "main")
        model = fb.ModelT()
        model.version, model.subgraphs, model.buffers, model.description = 3, [sub], self.buffers, "pegasus tests"
        model.operatorCodes = []
        for name, custom in self.codes:
            code = fb.OperatorCodeT()
            code.builtinCode = getattr(fb.BuiltinOperator, name)
            code.deprecatedBuiltinCode = min(code.builtinCode, 127)
            code.version = 1
            if custom:
                code.customCode = custom
            model.operatorCodes.append(code)
        return pack(model)


def options(kind: str, **fields):
    """An options object, e.g. options("SoftmaxOptions", beta=0.5) (fields in the schema's camelCase)."""
    obj = getattr(fb, f"{kind}T")()
    for key, value in fields.items():
        if not hasattr(obj, key):
            raise AttributeError(f"{kind} has no field {key}")
        setattr(obj, key, value)
    return obj


def pack(model) -> bytes:
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def unpack(buf: bytes):
    return fb.ModelT.InitFromPackedBuf(bytearray(buf), 0)


def with_float_weights(buf: bytes) -> tuple[bytes, int]:
    """A copy of a dynamic-range model whose int8 weights are float32 ((q - zero point) * scale, computed here
    with NumPy), so that TFLite runs its float kernels on them; and how many tensors changed."""
    model = unpack(buf)
    changed = 0
    for sub in model.subgraphs:
        for t in sub.tensors:
            q = t.quantization
            data = model.buffers[t.buffer].data if t.buffer else None
            if t.type != fb.TensorType.INT8 or q is None or q.scale is None or data is None or not len(data):
                continue
            values = np.frombuffer(np.asarray(data, np.uint8).tobytes(), np.int8).reshape(t.shape).astype(np.float64)
            shape = [1] * values.ndim
            if len(q.scale) > 1:
                shape[q.quantizedDimension] = -1
            zero = np.asarray(q.zeroPoint if q.zeroPoint is not None else [0], np.float64).reshape(shape)
            real = ((values - zero) * np.asarray(q.scale, np.float64).reshape(shape)).astype(np.float32)
            model.buffers[t.buffer].data = np.frombuffer(real.tobytes(), np.uint8)
            t.type, t.quantization = fb.TensorType.FLOAT32, None
            changed += 1
    return pack(model), changed
