"""TFLite: the flatbuffer reader (tensors, buffers, quantization, sparsity, options), the float and pre-quantized
import paths and the .quantize table; the graph is then written as NAME.json/.data (what `pegasus import
tflite` does).

The structure-aware mutator unpacks the model with the schema's generated object API (``ModelT``, from the
TensorFlow/LiteRT wheel's ``schema_py_generated.py``, loaded from its file so TensorFlow itself is not
imported), changes one field — a tensor's shape, type or buffer, a buffer's length, an operator's tensor
indices or opcode, an option, a quantization scale or zero point — and packs it again."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

from fuzz.targets import target

INTS = [0, 1, -1, 2, 3, 7, 255, 2**15, 2**31 - 1, -2**31, 2**30]
FLOATS = [0.0, -1.0, 1e-45, 1e38, float("nan"), float("inf"), float("-inf")]
_SCHEMA = None


def schema():
    """The generated flatbuffer classes with the object API (None when no wheel ships them)."""
    global _SCHEMA
    if _SCHEMA is None:
        for root in map(Path, sys.path):
            for relative in ("ai_edge_litert/schema_py_generated.py", "tensorflow/lite/python/schema_py_generated.py"):
                path = root / relative
                if path.is_file():
                    spec = importlib.util.spec_from_file_location("_fuzz_tflite_schema", path)
                    module = importlib.util.module_from_spec(spec)
                    spec.loader.exec_module(module)
                    _SCHEMA = module
                    return _SCHEMA
        raise RuntimeError("no schema_py_generated.py with the object API")
    return _SCHEMA


def _set_list(values, rng: random.Random, pool) -> list:
    values = list(values) if values is not None else []
    action = rng.randrange(4)
    if action == 0 and values:
        values[rng.randrange(len(values))] = rng.choice(pool)
    elif action == 1:
        values.insert(rng.randrange(len(values) + 1), rng.choice(pool))
    elif action == 2 and values:
        del values[rng.randrange(len(values))]
    else:
        values = [rng.choice(pool) for _ in range(rng.randint(0, 5))]
    return values


def _mutate_tensor(model, graph, rng: random.Random) -> None:
    tensor = rng.choice(graph.tensors)
    action = rng.randrange(5)
    if action == 0:
        tensor.shape = _set_list(tensor.shape, rng, INTS)
    elif action == 1:
        tensor.shapeSignature = _set_list(tensor.shapeSignature, rng, [-1, *INTS])
    elif action == 2:
        tensor.type = rng.choice([*range(0, 19), 99])
    elif action == 3:
        tensor.buffer = rng.choice([0, 1, len(model.buffers) - 1, len(model.buffers), 2**31 - 1])
    else:
        tensor.isVariable = not tensor.isVariable


def _mutate_buffer(model, graph, rng: random.Random) -> None:
    full = [b for b in model.buffers if b.data is not None and len(b.data)]
    if not full:
        return
    buffer = rng.choice(full)
    data = bytes(bytearray(buffer.data))
    if rng.random() < 0.5:
        data = data[: rng.randrange(len(data))]
    else:
        data = data + data[: rng.randint(1, 16)]
    buffer.data = list(data)


def _mutate_operator(model, graph, rng: random.Random) -> None:
    if not graph.operators:
        return
    op = rng.choice(graph.operators)
    count = len(graph.tensors)
    pool = [-1, 0, count - 1, count, 2**31 - 1, *range(min(count, 8))]
    action = rng.randrange(4)
    if action == 0:
        op.inputs = _set_list(op.inputs, rng, pool)
    elif action == 1:
        op.outputs = _set_list(op.outputs, rng, pool)
    elif action == 2:
        op.opcodeIndex = rng.choice([0, len(model.operatorCodes) - 1, len(model.operatorCodes), 2**31 - 1])
    else:
        code = rng.choice(model.operatorCodes)
        code.builtinCode = rng.choice([0, 1, 3, 4, 9, 17, 22, 25, 40, 49, 127, 200])
        code.deprecatedBuiltinCode = min(code.builtinCode, 127)


def _mutate_options(model, graph, rng: random.Random) -> None:
    ops = [op for op in graph.operators if op.builtinOptions is not None]
    if not ops:
        return
    options = rng.choice(ops).builtinOptions
    fields = [k for k, v in vars(options).items() if isinstance(v, (int, float, bool, list))]
    if not fields:
        return
    key = rng.choice(fields)
    value = getattr(options, key)
    if isinstance(value, bool):
        setattr(options, key, not value)
    elif isinstance(value, list):
        setattr(options, key, _set_list(value, rng, INTS))
    elif isinstance(value, float):
        setattr(options, key, rng.choice(FLOATS))
    else:
        setattr(options, key, rng.choice(INTS + [2**7 - 1, 99]))


def _mutate_quantization(model, graph, rng: random.Random) -> None:
    quantized = [t for t in graph.tensors if t.quantization is not None and t.quantization.scale is not None]
    if not quantized:
        return
    q = rng.choice(quantized).quantization
    action = rng.randrange(3)
    if action == 0:
        q.scale = _set_list(q.scale, rng, FLOATS)
    elif action == 1:
        q.zeroPoint = _set_list(q.zeroPoint, rng, INTS)
    else:
        q.quantizedDimension = rng.choice(INTS)


def _mutate_io(model, graph, rng: random.Random) -> None:
    count = len(graph.tensors)
    pool = [-1, 0, count - 1, count, *range(min(count, 8))]
    if rng.random() < 0.5:
        graph.inputs = _set_list(graph.inputs, rng, pool)
    else:
        graph.outputs = _set_list(graph.outputs, rng, pool)


MUTATIONS = [_mutate_tensor, _mutate_tensor, _mutate_buffer, _mutate_operator, _mutate_operator, _mutate_options,
             _mutate_quantization, _mutate_io]


def mutate_tflite(data: bytes, rng: random.Random) -> bytes:
    import flatbuffers

    schema_module = schema()
    model = schema_module.ModelT.InitFromPackedBuf(bytearray(data), 0)
    graph = model.subgraphs[0]
    for _ in range(rng.choice([1, 1, 1, 2])):
        rng.choice(MUTATIONS)(model, graph, rng)
    builder = flatbuffers.Builder(len(data) + 1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


@target("tflite", structured=mutate_tflite)
def read_tflite_model(path: Path, scratch: Path) -> None:
    from pegasus.importers.tflite.loader import import_tflite
    from pegasus.importers.tflite.quantized import quantize_table
    from pegasus.importers.tflite.reader import read_tflite
    from pegasus.ir.serialize import save

    model = read_tflite(path)
    graph = import_tflite(model)
    quantize_table(model, graph)
    save(graph, scratch / "m.json", scratch / "m.data")
