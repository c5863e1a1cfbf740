"""What fuzzing the ONNX, TFLite and sample readers found (issue 35), each input rebuilt here from its cause: one
line and exit 2 where the file breaks its format, never an internal error or a NumPy warning. Also issue 35's
defects 1 (an initializer's raw data shorter than its dims) and 4 (a graph with a cycle)."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from tests.security.harness import assert_refused, run_many
from tests.support.requirements import need_module

X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)


def _save(path, nodes, inits=(), inputs=(X,), opset=13):
    model = helper.make_model(helper.make_graph(nodes, "g", list(inputs), [Y], list(inits)),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _short_raw_data(path):
    w = numpy_helper.from_array(np.zeros((64, 64), np.float32), "w")
    w.raw_data = b"\0" * 100
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])
    return _save(path, [helper.make_node("MatMul", ["x", "w"], ["y"])], [w], [x])


def _cycle(path):
    return _save(path, [helper.make_node("Add", ["x", "z"], ["a"], name="Add_0"),
                        helper.make_node("Relu", ["a"], ["z"], name="Relu_1"),
                        helper.make_node("Relu", ["a"], ["y"], name="out")])


def _attribute_of_other_type(path):
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2])
    node.attribute[0].type = AttributeProto.GRAPH  # declared a graph, holds ints
    return _save(path, [node])


def _missing_required_attribute(path):
    return _save(path, [helper.make_node("Unsqueeze", ["x"], ["y"])], opset=11)


def _too_few_inputs(path):
    return _save(path, [helper.make_node("Reshape", ["x"], ["y"])])


def _empty_required_input(path):
    return _save(path, [helper.make_node("Add", ["x", ""], ["y"])])


def _not_utf8(path):
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2])
    node.attribute.add().CopyFrom(helper.make_attribute("auto_pad", b"\xff\xfe"))
    return _save(path, [node])


def _complex_initializer(path):
    c = numpy_helper.from_array(np.ones((1, 3, 4, 4), np.complex64), "c")
    return _save(path, [helper.make_node("Add", ["x", "c"], ["y"])], [c])


def _infinite_scales(path):
    scales = numpy_helper.from_array(np.array([1, 1, np.inf, 2], np.float32), "s")
    return _save(path, [helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest")], [scales])


def _two_producers(path):
    return _save(path, [helper.make_node("Relu", ["x"], ["y"], name="first"),
                        helper.make_node("Sigmoid", ["x"], ["y"], name="second")])


def _undefined_attribute(path):
    return _save(path, [helper.make_node("Relu", ["x"], ["y"], axes=[1])])


CASES = {  # builder -> words the one line must hold
    _short_raw_data: ["initializer 'w'", "[64, 64]", "16384", "100"],
    _cycle: ["cycle", "Add 'Add_0'", "Relu 'Relu_1'"],
    _attribute_of_other_type: ["kernel_shape", "GRAPH"],
    _missing_required_attribute: ["Unsqueeze", "axes"],
    _too_few_inputs: ["Reshape", "1 input"],
    _empty_required_input: ["Add", "input 1", "empty"],
    _not_utf8: ["auto_pad", "UTF-8"],
    _complex_initializer: ["'c'", "COMPLEX64"],
    _infinite_scales: ["scales", "finite"],
    _two_producers: ["'y'", "two nodes", "Relu 'first'", "Sigmoid 'second'"],
    _undefined_attribute: ["Relu", "'axes'", "does not define"],
}


def _import(path, out):
    return ["import", "onnx", "--model", path, "--output-model", out / f"{path.stem}.json",
            "--output-data", out / f"{path.stem}.data"]


def test_onnx_files_breaking_the_standard_get_one_line(tmp_path):
    paths = [build(tmp_path / f"{build.__name__.strip('_')}.onnx") for build in CASES]
    results = run_many([_import(path, tmp_path) for path in paths], cwd=tmp_path)
    for words, result in zip(CASES.values(), results):
        assert_refused(result, *words)
    assert not list(tmp_path.glob("*.json"))


def test_batchnorm_with_negative_variance_imports_without_warnings(tmp_path):
    """A Conv + BatchNormalization whose variance is negative: nothing to fold (the affine is NaN), no warning."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
             *(numpy_helper.from_array(np.full(4, v, np.float32), n) for n, v in
               (("s", 1.0), ("o", 0.0), ("m", 0.0), ("v", -5.0)))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "o", "m", "v"], ["y"])]
    path = _save(tmp_path / "bn.onnx", nodes, inits)
    [result] = run_many([_import(path, tmp_path)], cwd=tmp_path)
    assert result.code == 0, result.stderr
    assert "Warning" not in result.stderr


def _tflite_without_filter(path):
    import flatbuffers

    from fuzz.targets.tflite import schema

    source = (path.parents[0] / "convnet_float.tflite")
    module = schema()
    model = module.ModelT.InitFromPackedBuf(bytearray(source.read_bytes()), 0)
    graph = model.subgraphs[0]
    codes = [module.BuiltinOperator.CONV_2D == max(c.builtinCode, c.deprecatedBuiltinCode) for c in model.operatorCodes]
    conv = next(op for op in graph.operators if codes[op.opcodeIndex])
    conv.inputs = [conv.inputs[0], -1, *conv.inputs[2:]]
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    path.write_bytes(bytes(builder.Output()))
    return path


def _png_bomb(path):
    """A PNG whose header declares 2^17 x 2^17 pixels (a few hundred bytes)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", 2**17, 2**17, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                     + chunk(b"IEND", b""))
    return path


def test_tflite_and_samples(tmp_path):
    import shutil

    from tests.conftest import ROOT

    shutil.copyfile(ROOT / "fuzz" / "corpus" / "tflite" / "convnet_float.tflite", tmp_path / "convnet_float.tflite")
    need_module("tflite")
    no_filter = _tflite_without_filter(tmp_path / "nofilter.tflite")
    onnx_model = _save(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"])],
                       inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])])
    bomb = _png_bomb(tmp_path / "bomb.png")
    results = run_many([
        ["import", "tflite", "--model", no_filter, "--output-model", tmp_path / "t.json",
         "--output-data", tmp_path / "t.data"],
        _import(onnx_model, tmp_path),
        ["inference", "--model", tmp_path / "m.json", "--model-data", tmp_path / "m.data", "--input", bomb,
         "--output-dir", tmp_path / "out"],
    ], cwd=tmp_path)
    assert_refused(results[0], "CONV_2D", "lacks input 1")
    assert results[1].code == 0, results[1].stderr
    assert_refused(results[2], "bomb.png")
