"""ONNX: the protobuf reader, external data, converters, constant folding and the import passes; the graph is
then written as NAME.json/.data (what `pegasus import onnx` does).

The structure-aware mutator parses the model and changes one field the byte mutators rarely hit while keeping
the protobuf valid: a tensor's dims or data_type, the length of its raw_data, a node attribute, a node's input
names (a name nothing defines, a later node's output: a cycle), external_data entries, an op type, the opset."""

from __future__ import annotations

import random
from pathlib import Path

from fuzz.targets import target

DIMS = [0, 1, 2, 3, -1, -7, 2**31 - 1, 2**31, 2**32 + 1, 2**40, 2**62, 2**63 - 1]
INTS = [0, 1, -1, 2, 3, -2, 7, 64, 2**31 - 1, -2**31, 2**40, 2**63 - 1, -2**63]
FLOATS = [0.0, -1.0, 1e-45, 1e38, float("nan"), float("inf"), float("-inf"), 3.5]
ATTR_NAMES = ["axis", "axes", "perm", "pads", "kernel_shape", "strides", "dilations", "group", "transA", "transB",
              "keepdims", "alpha", "beta", "epsilon", "mode", "value", "to", "hidden_size", "direction", "auto_pad",
              "coordinate_transformation_mode", "output_padding", "ceil_mode", "split", "starts", "ends", "blocksize"]
STRINGS = [b"", b"NOTSET", b"SAME_UPPER", b"VALID", b"linear", b"nearest", b"bidirectional", b"reverse",
           b"\xff\xfe", b"a" * 300]
LOCATIONS = ["w.bin", "", "/etc/passwd", "../../etc/passwd", "a/../../b", "x\0y", "C:\\x", ".", "sub/"]


def _tensors(model):
    graph = model.graph
    found = list(graph.initializer)
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                found.append(attr.t)
            found.extend(attr.tensors)
    return found


def _value_infos(model):
    graph = model.graph
    return list(graph.input) + list(graph.output) + list(graph.value_info)


def _mutate_dims(model, rng: random.Random) -> None:
    choices = _tensors(model)
    if choices and rng.random() < 0.6:
        tensor = rng.choice(choices)
        dims = list(tensor.dims)
        action = rng.randrange(4)
        if action == 0 and dims:
            dims[rng.randrange(len(dims))] = rng.choice(DIMS)
        elif action == 1:
            dims.insert(rng.randrange(len(dims) + 1), rng.choice(DIMS))
        elif action == 2 and dims:
            del dims[rng.randrange(len(dims))]
        else:
            dims = [rng.choice(DIMS) for _ in range(rng.randint(0, 6))]
        del tensor.dims[:]
        tensor.dims.extend(dims)
        return
    infos = [vi for vi in _value_infos(model) if vi.type.HasField("tensor_type")]
    if not infos:
        return
    shape = rng.choice(infos).type.tensor_type.shape
    if shape.dim and rng.random() < 0.7:
        dim = shape.dim[rng.randrange(len(shape.dim))]
        if rng.random() < 0.8:
            dim.dim_value = rng.choice(DIMS)
        else:
            dim.dim_param = rng.choice(["N", "batch", "", "unk__1"])
    else:
        shape.dim.add().dim_value = rng.choice(DIMS)


def _mutate_dtype(model, rng: random.Random) -> None:
    value = rng.choice([*range(0, 27), 99, -1])
    if rng.random() < 0.7 and _tensors(model):
        rng.choice(_tensors(model)).data_type = value
    else:
        infos = [vi for vi in _value_infos(model) if vi.type.HasField("tensor_type")]
        if infos:
            rng.choice(infos).type.tensor_type.elem_type = max(value, 0)


def _mutate_data(model, rng: random.Random) -> None:
    tensors = _tensors(model)
    if not tensors:
        return
    tensor = rng.choice(tensors)
    raw = bytes(tensor.raw_data)
    action = rng.randrange(4)
    if action == 0:
        tensor.raw_data = raw[: rng.randrange(len(raw) + 1)]
    elif action == 1:
        tensor.raw_data = raw + raw[: rng.randint(1, 9)] if raw else b"\x01" * rng.randint(1, 9)
    elif action == 2:  # typed data where raw data was, or both
        tensor.float_data.extend([rng.choice(FLOATS) for _ in range(rng.randint(0, 5))])
        if rng.random() < 0.5:
            tensor.ClearField("raw_data")
    else:  # NaN/inf (or huge integers) in the raw bytes
        data = bytearray(raw or b"\0\0\0\0")
        pos = rng.randrange(max(1, len(data) - 3))
        data[pos:pos + 4] = rng.choice([b"\x00\x00\xc0\x7f", b"\x00\x00\x80\x7f", b"\xff\xff\xff\x7f", b"\0\0\0\x80"])
        tensor.raw_data = bytes(data)


def _mutate_attribute(model, rng: random.Random) -> None:
    from onnx import AttributeProto

    nodes = list(model.graph.node)
    if not nodes:
        return
    node = rng.choice(nodes)
    attrs = list(node.attribute)
    action = rng.randrange(5)
    if action == 0 or not attrs:  # a new attribute, maybe a duplicate name
        attr = node.attribute.add()
        attr.name = rng.choice(ATTR_NAMES + [a.name for a in attrs])
        kind = rng.randrange(4)
        if kind == 0:
            attr.type, attr.i = AttributeProto.INT, rng.choice(INTS)
        elif kind == 1:
            attr.type = AttributeProto.INTS
            attr.ints.extend(rng.choice(INTS) for _ in range(rng.randint(0, 9)))
        elif kind == 2:
            attr.type, attr.f = AttributeProto.FLOAT, rng.choice(FLOATS)
        else:
            attr.type, attr.s = AttributeProto.STRING, rng.choice(STRINGS)
        return
    attr = rng.choice(attrs)
    if action == 1:
        node.attribute.remove(attr)
    elif action == 2:  # the declared type no longer matches the value set
        attr.type = rng.choice([0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 13])
    elif action == 3:
        if attr.ints:
            values = list(attr.ints)
            if rng.random() < 0.5:
                values[rng.randrange(len(values))] = rng.choice(INTS)
            else:
                values = values[: rng.randrange(len(values) + 1)] + [rng.choice(INTS)] * rng.randint(0, 3)
            del attr.ints[:]
            attr.ints.extend(values)
        elif attr.type == AttributeProto.FLOAT:
            attr.f = rng.choice(FLOATS)
        elif attr.type == AttributeProto.STRING:
            attr.s = rng.choice(STRINGS)
        else:
            attr.i = rng.choice(INTS)
    else:
        attr.name = rng.choice(ATTR_NAMES)


def _mutate_inputs(model, rng: random.Random) -> None:
    nodes = list(model.graph.node)
    if not nodes:
        return
    index = rng.randrange(len(nodes))
    node = nodes[index]
    names = [n for other in nodes for n in other.output] + [i.name for i in model.graph.initializer]
    names += [vi.name for vi in model.graph.input]
    later = [n for other in nodes[index:] for n in other.output]
    choice = rng.choice([*names, "", "nothing", rng.choice(later) if later else "x"])
    action = rng.randrange(4)
    if action == 0 and node.input:
        node.input[rng.randrange(len(node.input))] = choice
    elif action == 1:
        node.input.append(choice)
    elif action == 2 and node.input:
        del node.input[rng.randrange(len(node.input)):]
    else:
        targets = [node.output, model.graph.output] if rng.random() < 0.5 else [node.output]
        seq = rng.choice(targets)
        if seq is node.output and node.output:
            node.output[rng.randrange(len(node.output))] = choice
        elif len(seq):
            seq[rng.randrange(len(seq))].name = choice


def _mutate_external(model, rng: random.Random) -> None:
    from onnx import TensorProto

    tensors = _tensors(model)
    if not tensors:
        return
    tensor = rng.choice(tensors)
    tensor.data_location = TensorProto.EXTERNAL if rng.random() < 0.9 else TensorProto.DEFAULT
    del tensor.external_data[:]
    raw = len(tensor.raw_data)
    for key, values in (("location", LOCATIONS), ("offset", ["0", "-1", "18446744073709551616", "x", "4096"]),
                        ("length", [str(raw), "0", "-4", str(2**40), "1e3"]), ("checksum", ["0"])):
        if key == "location" or rng.random() < 0.6:
            entry = tensor.external_data.add()
            entry.key, entry.value = key, rng.choice(values)
    if rng.random() < 0.5:
        tensor.ClearField("raw_data")


def _mutate_op(model, rng: random.Random) -> None:
    nodes = list(model.graph.node)
    if rng.random() < 0.3 or not nodes:
        for entry in model.opset_import:
            entry.version = rng.choice([1, 6, 7, 9, 11, 13, 17, 21, 99, -1, 2**40])
        return
    node = rng.choice(nodes)
    ops = sorted({n.op_type for n in nodes}) + ["Conv", "Gemm", "Reshape", "Transpose", "Split", "Slice",
                                               "ConstantOfShape", "Loop", "If", "Resize", "Gather", "Einsum"]
    node.op_type = rng.choice(ops)
    if rng.random() < 0.2:
        node.domain = rng.choice(["com.microsoft", "ai.onnx.ml", "x"])


MUTATIONS = [_mutate_dims, _mutate_dims, _mutate_dtype, _mutate_data, _mutate_attribute, _mutate_attribute,
             _mutate_inputs, _mutate_external, _mutate_op]


def mutate_onnx(data: bytes, rng: random.Random) -> bytes:
    """Parse, change one or two fields, serialise."""
    import onnx

    model = onnx.load_model_from_string(data)
    for _ in range(rng.choice([1, 1, 1, 2])):
        rng.choice(MUTATIONS)(model, rng)
    return model.SerializeToString()


@target("onnx", structured=mutate_onnx)
def read_onnx(path: Path, scratch: Path) -> None:
    from pegasus.importers.onnx.loader import import_onnx
    from pegasus.ir.serialize import save

    save(import_onnx(path), scratch / "m.json", scratch / "m.data")
