"""Crafted TensorFlow files (issue 37): each is written here from raw protobuf messages, and checkpoints with a
LevelDB-table writer of this file's own, then imported by pegasus under the harness's address-space limit.

- GraphDef Consts that declare [2^30] and [2^33] floats with one value (133 bytes: 4 GB before), a
  tensor_content too short, a Split of 2^40 parts, a Fill folded to 2^36 elements, the graph input named in
  ``--predef-file``, a predef member declaring 2^40 floats (1 MB deflated to a few KB) or an object array,
  functions f_i calling f_(i+1) twice 40 levels deep (8 KB: exponential inlining), and byte
  flips and truncations of small legit files: each one line, exit 2 (never 1, never a crash).
- SavedModel checkpoints (``variables.index`` + data shard): a dimension of -5, dims [2^62, 2^62, 4], dtype
  12345, a string tensor [2^30] (these aborted or crashed TensorFlow's reader), sizes that disagree, offset 2^62,
  shard 7, a data shard that is a symbolic link to a secret (with a matching CRC: its bytes would be imported)
  or a FIFO (hung), a wrong CRC (TensorFlow's error printed the checksum of the bytes read: an oracle), an index
  block compressed or damaged: each one line, no checksum and no secret in any output.
- The legit versions import and compute what TensorFlow computes: nested functions, a SavedModel whose
  checkpoint this file's writer rewrote (read by TensorFlow itself for the expected answer).
"""

from __future__ import annotations

import io
import os
import random
import shutil
import struct
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.security.harness import assert_refused, run_many
from tests.support.requirements import need_module

pytestmark = pytest.mark.xdist_group("tensorflow")
tf = need_module("tensorflow")
from tensorflow.core.framework import attr_value_pb2, function_pb2, graph_pb2, types_pb2  # noqa: E402
from tensorflow.core.protobuf import tensor_bundle_pb2  # noqa: E402

F32 = types_pb2.DT_FLOAT
KEY = "w/.ATTRIBUTES/VARIABLE_VALUE"
SECRET = b"TF37-SECRET-MARKER-0123456789ab"     # the file a symlinked shard points at
WEIGHTS = np.array([0.5, -1.25, 2.0, 3.5], np.float32)


# ---- raw protobuf graphs ---------------------------------------------------------------------------------
def _attr(value) -> attr_value_pb2.AttrValue:
    if isinstance(value, attr_value_pb2.AttrValue):
        return value
    if isinstance(value, str):
        return attr_value_pb2.AttrValue(func=attr_value_pb2.NameAttrList(name=value))
    if isinstance(value, bool):
        return attr_value_pb2.AttrValue(b=value)
    if isinstance(value, int):
        return attr_value_pb2.AttrValue(i=value)
    return attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(type=value))   # a list of dtypes


def _node(where, name: str, op: str, inputs=(), **attrs):
    node = where.node.add() if hasattr(where, "node") else where.node_def.add()
    node.name, node.op = name, op
    node.input.extend(inputs)
    for key, value in attrs.items():
        node.attr[key].CopyFrom(_attr(value))
    return node


def _type(dtype=F32) -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(type=dtype)


def _const(where, name: str, dims, values=(), content: bytes = b"", dtype=F32):
    node = _node(where, name, "Const", dtype=_type(dtype))
    tensor = node.attr["value"].tensor
    tensor.dtype = dtype
    for dim in dims:
        tensor.tensor_shape.dim.add().size = dim
    if dtype == F32:
        tensor.float_val.extend(values)
    else:
        tensor.int_val.extend(values)
    tensor.tensor_content = content
    return node


def _graph(body=None) -> graph_pb2.GraphDef:
    """x: Placeholder [1, 4]; ``body(graph)`` adds nodes; y = Identity(x) unless the body defines y."""
    graph = graph_pb2.GraphDef()
    node = _node(graph, "x", "Placeholder", dtype=_type())
    for dim in (1, 4):
        node.attr["shape"].shape.dim.add().size = dim
    if body:
        body(graph)
    if not any(n.name == "y" for n in graph.node):
        _node(graph, "y", "Identity", ["x"], T=_type())
    return graph


def _function(name: str, body, ret: str) -> function_pb2.FunctionDef:
    function = function_pb2.FunctionDef()
    function.signature.name = name
    arg = function.signature.input_arg.add()
    arg.name, arg.type = "a", F32
    out = function.signature.output_arg.add()
    out.name, out.type = "out", F32
    body(function)
    function.ret["out"] = ret
    return function


def _call(where, name: str, function: str, inputs, op="PartitionedCall"):
    return _node(where, name, op, inputs, f=function, Tin=[F32], Tout=[F32])


def nested_calls(depth: int) -> graph_pb2.GraphDef:
    """f_i(a) = f_(i+1)(f_(i+1)(a)), f_depth(a) = Relu(a): 2^depth Relus once inlined."""
    def body(graph):
        for level in range(depth + 1):
            def inner(function, level=level):
                if level == depth:
                    _node(function, "r", "Relu", ["a"], T=_type())
                else:
                    _call(function, "c", f"f{level + 1}", ["a"])
                    _call(function, "r", f"f{level + 1}", ["c:output:0"])
            graph.library.function.append(_function(f"f{level}", inner, "r:" + (
                "activations:0" if level == depth else "output:0")))
        _call(graph, "call", "f0", ["x"], "StatefulPartitionedCall")
        _node(graph, "y", "Identity", ["call"], T=_type())
    return _graph(body)


def legit_functions() -> graph_pb2.GraphDef:
    """f0(a) = f1(a) + f1(a), f1(a) = f2(f2(a)), f2(a) = Relu(a) * 2 - 1 (a constant inside): nested calls as
    tf.function leaves them."""
    def f2(function):
        _const(function, "two", [], [2.0])
        _const(function, "one", [], [1.0])
        _node(function, "r", "Relu", ["a"], T=_type())
        _node(function, "m", "Mul", ["r:activations:0", "two:output:0"], T=_type())
        _node(function, "s", "Sub", ["m:z:0", "one:output:0"], T=_type())

    def f1(function):
        _call(function, "c", "f2", ["a"])
        _call(function, "d", "f2", ["c:output:0"])

    def f0(function):
        _call(function, "c", "f1", ["a"])
        _call(function, "d", "f1", ["a"])
        _node(function, "s", "AddV2", ["c:output:0", "d:output:0"], T=_type())

    def body(graph):
        graph.library.function.extend([_function("f2", f2, "s:z:0"), _function("f1", f1, "d:output:0"),
                                       _function("f0", f0, "s:z:0")])
        _call(graph, "call", "f0", ["x"], "StatefulPartitionedCall")
        _node(graph, "y", "Identity", ["call"], T=_type())
    return _graph(body)


# ---- checkpoints: a LevelDB table of BundleHeaderProto / BundleEntryProto ---------------------------------
def _crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def _mask(crc: int) -> int:
    return ((crc >> 15 | crc << 17) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def _block(entries) -> bytes:
    body = b"".join(_varint(0) + _varint(len(k)) + _varint(len(v)) + k + v for k, v in entries)
    return body + struct.pack("<II", 0, 1)              # one restart point, at 0


def write_index(path: Path, entries, compression: int = 0, damage: bool = False) -> None:
    out = bytearray()

    def emit(content: bytes) -> bytes:
        offset = len(out)
        trailer = bytes([compression])
        out.extend(content + trailer + struct.pack("<I", _mask(_crc32c(content + trailer)) ^ damage))
        return _varint(offset) + _varint(len(content))

    data = emit(_block(entries))
    meta = emit(_block([]))
    index = emit(_block([(entries[-1][0] + b"\xff", data)]))
    footer = meta + index
    out.extend(footer + b"\0" * (40 - len(footer)) + struct.pack("<Q", 0xDB4775248B80FB57))
    path.write_bytes(bytes(out))


def entry(dtype=F32, dims=(4,), shard=0, offset=0, size=16, crc=None, data: bytes | None = None):
    """A BundleEntryProto; its CRC is that of ``data`` (default: the weights) at offset/size unless given."""
    data = WEIGHTS.tobytes() if data is None else data
    proto = tensor_bundle_pb2.BundleEntryProto(dtype=dtype, shard_id=shard, offset=offset, size=size,
                                               crc32c=_mask(_crc32c(data[offset:offset + size])) if crc is None
                                               else crc)
    for dim in dims:
        proto.shape.dim.add().size = dim
    return proto


def write_checkpoint(folder: Path, proto, data: bytes | None = None, **index) -> None:
    """Replace the SavedModel's checkpoint by one holding ``proto`` under the variable's key (data: the
    weights)."""
    data = WEIGHTS.tobytes() if data is None else data
    variables = folder / "variables"
    for old in variables.iterdir():
        old.unlink()
    header = tensor_bundle_pb2.BundleHeaderProto(num_shards=1)
    write_index(variables / "variables.index", [(b"", header.SerializeToString()),
                                                (KEY.encode(), proto.SerializeToString())], **index)
    (variables / "variables.data-00000-of-00001").write_bytes(data)


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory) -> Path:
    """y = x + w, w a variable [4] (checkpoint key w/.ATTRIBUTES/VARIABLE_VALUE), saved by TensorFlow."""
    class Module(tf.Module):
        def __init__(self):
            self.w = tf.Variable(tf.ones([4]), name="w")

        @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": x + self.w}

    folder = tmp_path_factory.mktemp("tf37") / "base"
    module = Module()
    tf.saved_model.save(module, str(folder), signatures=module.__call__)
    assert KEY in dict(tf.train.list_variables(str(folder / "variables" / "variables")))
    return folder


# ---- tests -----------------------------------------------------------------------------------------------
def _import(model: Path, out: Path, *extra) -> list[str]:
    return ["import", "tensorflow", "--model", model, "--output-model", out / f"{model.stem}.json", *extra]


def test_graph_cases_refused(tmp_path):
    def fill(graph):
        _const(graph, "dims", [2], [1 << 18, 1 << 18], dtype=types_pb2.DT_INT32)
        _const(graph, "v", [], [1.0])
        _node(graph, "f", "Fill", ["dims", "v"], T=_type(), index_type=_type(types_pb2.DT_INT32))
        _node(graph, "y", "AddV2", ["x", "f"], T=_type())

    def split(graph):
        _const(graph, "axis", [], [1], dtype=types_pb2.DT_INT32)
        _node(graph, "s", "Split", ["axis", "x"], T=_type(), num_split=1 << 40)

    graphs = {
        "const30": (lambda g: _const(g, "big", [1 << 30], [1.0]), "big", "shape [1073741824]"),
        "const33": (lambda g: _const(g, "big", [1 << 33], [1.0]), "big", "8589934592"),
        "content": (lambda g: _const(g, "short", [1000], content=b"\0" * 12), "short", "12 bytes"),
        "toomany": (lambda g: _const(g, "many", [2], [1.0, 2.0, 3.0]), "many", "3 values"),
        "negative": (lambda g: _const(g, "neg", [-3, 4], [1.0]), "neg", "negative"),
        "fill": (fill, "Fill", "needs"),
        "split": (split, "Split", "outputs"),
    }
    out = tmp_path / "out"
    cases = []
    for name, (body, *_) in graphs.items():
        (tmp_path / f"{name}.pb").write_bytes(_graph(body).SerializeToString())
        cases.append(_import(tmp_path / f"{name}.pb", out, "--inputs", "x", "--outputs", "y"))
    np.savez(tmp_path / "prd.npz", x=np.ones((1, 4), np.float32))
    (tmp_path / "plain.pb").write_bytes(_graph().SerializeToString())
    cases.append(_import(tmp_path / "plain.pb", out, "--inputs", "x", "--outputs", "y", "--predef-file",
                         tmp_path / "prd.npz"))
    predefs = {"bomb": (np.float32, (1 << 40,), "needs"), "object": (object, (), "object array")}
    for name, (dtype, shape, _) in predefs.items():
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                      "fortran_order": False, "shape": shape})
        with zipfile.ZipFile(tmp_path / f"{name}.npz", "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("is_training.npy", header.getvalue() + b"\0" * (1 << 20))
        cases.append(_import(tmp_path / "plain.pb", out, "--inputs", "x", "--outputs", "y", "--predef-file",
                             tmp_path / f"{name}.npz"))
    results = run_many(cases)
    for (name, (_, *words)), result in zip(graphs.items(), results):
        assert_refused(result, f"{name}.pb", *words)
    assert_refused(results[len(graphs)], "--predef-file", "'x'", "input")
    for (name, (*_, words)), result in zip(predefs.items(), results[len(graphs) + 1:]):
        assert_refused(result, f"{name}.npz", "is_training", words)


def test_exponential_inlining_refused_in_seconds(tmp_path):
    """2^40 nodes once inlined (before: 4.5 GB and growing); refused once the inlined nodes pass the budget."""
    (tmp_path / "deep.pb").write_bytes(nested_calls(40).SerializeToString())
    assert (tmp_path / "deep.pb").stat().st_size < 10_000
    start = time.monotonic()
    result, = run_many([_import(tmp_path / "deep.pb", tmp_path, "--inputs", "x", "--outputs", "y")], timeout=150)
    assert_refused(result, "deep.pb", "inlining function", "calls deep")
    assert time.monotonic() - start < 150


def test_nested_functions_import_as_tensorflow_computes(tmp_path):
    from pegasus.importers.tensorflow.loader import import_tensorflow
    from pegasus.runtime.interpreter import run

    graph_def = legit_functions()
    (tmp_path / "nested.pb").write_bytes(graph_def.SerializeToString())
    x = np.array([[-1.0, 0.25, 1.5, 3.0]], np.float32)
    with tf.Graph().as_default() as graph:
        tf.graph_util.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=graph) as session:
            expected = session.run("y:0", {"x:0": x})
    imported = import_tensorflow(tmp_path / "nested.pb", inputs=["x"], outputs=["y"])
    np.testing.assert_allclose(run(imported, {"x": x})["y"], expected, rtol=1e-6)


def test_mutated_graphs_give_one_line(tmp_path):
    """Byte flips and truncations of two small legit files: imported, or one line with exit 2."""
    rng = random.Random(37)
    cases = []
    for label, data in (("nested", legit_functions().SerializeToString()),
                        ("deep", nested_calls(3).SerializeToString())):
        for k in range(16):
            mutated = bytearray(data)
            if k % 4 == 0:
                mutated = mutated[:rng.randrange(1, len(mutated))]
            else:
                for _ in range(1 + k % 3):
                    mutated[rng.randrange(len(mutated))] ^= 1 << rng.randrange(8)
            path = tmp_path / f"{label}{k}.pb"
            path.write_bytes(bytes(mutated))
            cases.append(_import(path, tmp_path / "out", "--inputs", "x", "--outputs", "y"))
    for argv, result in zip(cases, run_many(cases)):
        assert result.code in (0, 2), (argv[3], result.code, result.stderr[-1500:])
        if result.code == 2:
            assert_refused(result)


def test_crafted_checkpoints_refused(tmp_path, saved_model):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(SECRET + b"!")
    wrong = _mask(_crc32c(WEIGHTS.tobytes()[:4] * 4))
    variants = {
        "negdim": (dict(proto=entry(dims=[-5])), ["negative dimension"]),
        "overflow": (dict(proto=entry(dims=[1 << 62, 1 << 62, 4])), ["shape"]),
        "badtype": (dict(proto=entry(dtype=12345)), ["dtype"]),
        "string": (dict(proto=entry(dtype=types_pb2.DT_STRING, dims=[1 << 30])), ["string"]),
        "huge": (dict(proto=entry(dims=[1 << 40], size=4 << 40)), ["shape"]),
        "size": (dict(proto=entry(size=12)), ["12 bytes"]),
        "offset": (dict(proto=entry(offset=1 << 62)), ["data shard"]),
        "shard": (dict(proto=entry(shard=7)), ["shard 7"]),
        "badcrc": (dict(proto=entry(crc=wrong)), ["checksum"]),
        "compressed": (dict(proto=entry(), compression=1), ["compressed"]),
        "damaged": (dict(proto=entry(), damage=True), ["checksum"]),
        "symlink": (dict(proto=entry(data=SECRET[:16])), ["symbolic link"]),
        "fifo": (dict(proto=entry()), ["not a regular file"]),
    }
    out = tmp_path / "out"
    cases = []
    for name, (kwargs, _) in variants.items():
        folder = tmp_path / name
        shutil.copytree(saved_model, folder)
        write_checkpoint(folder, **kwargs)
        cases.append(_import(folder, out))
    shard = "variables/variables.data-00000-of-00001"
    (tmp_path / "symlink" / shard).unlink()
    (tmp_path / "symlink" / shard).symlink_to(secret)
    (tmp_path / "fifo" / shard).unlink()
    os.mkfifo(tmp_path / "fifo" / shard)
    results = run_many(cases, timeout=200)
    for (name, (_, words)), result in zip(variants.items(), results):
        assert_refused(result, name, *words)
        line = result.lines[0]
        assert str(wrong) not in line and str(_crc32c(WEIGHTS.tobytes())) not in line, line
    for path in out.rglob("*") if out.exists() else []:
        assert SECRET not in path.read_bytes(), path


def test_rewritten_checkpoint_imports_as_tensorflow_reads_it(tmp_path, saved_model):
    """The SavedModel with its checkpoint rewritten by this file's writer: TensorFlow's checkpoint reader reads
    the weights from it, and pegasus computes what TensorFlow's model computes with those weights."""
    from pegasus.importers.tensorflow.loader import import_tensorflow
    from pegasus.runtime.interpreter import run

    folder = tmp_path / "rewritten"
    shutil.copytree(saved_model, folder)
    write_checkpoint(folder, entry())
    weights = tf.train.load_checkpoint(str(folder / "variables" / "variables")).get_tensor(KEY)
    np.testing.assert_array_equal(weights, WEIGHTS)
    model = tf.saved_model.load(str(saved_model))
    model.w.assign(weights)
    x = np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)
    expected = model.signatures["serving_default"](x=tf.constant(x))["y"].numpy()
    graph = import_tensorflow(folder)
    np.testing.assert_allclose(run(graph, {"x": x})["y"], expected, rtol=1e-6)
