"""Tiny ONNX and TFLite files that declare huge or inconsistent tensors, external data that points outside the
model's (or the sample's) folder, and broken quantization parameters: each is refused with one line (exit 2)
before anything large is allocated, and nothing is written. Legitimate models of the same shapes still import
and agree with onnxruntime; the budget is the one ``--max-tensor-bytes`` sets.

Every file is made here (onnx.helper, the TFLite schema's object API); the ideas come from the crafted
files of issue 37 (``shared/security/round2/{onnx,tfl}``, ``gen_onnx_dos.py``, ``gen_dump.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.security.harness import assert_each_refused, assert_refused, run_many

SECRET = b"CANARY-SECRET-0123456789abcdef!!"   # 32 bytes: 8 float32 that must never reach an output


def _save(path: Path, nodes, inits, x_shape=(1, 4), outputs=("y",)) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))
    ys = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    graph = helper.make_graph(nodes, "g", [x], ys, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


def _i64(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _f32(name, values):
    return numpy_helper.from_array(np.array(values, np.float32), name)


def _declared(name: str, dims, values) -> TensorProto:
    """A float tensor whose dims need not match its values (onnx.helper would check)."""
    tensor = TensorProto()
    tensor.name, tensor.data_type = name, TensorProto.FLOAT
    tensor.dims.extend(dims)
    tensor.float_data.extend(values)
    return tensor


def _filled(shape_input: str, value: float = 1.0):
    return helper.make_node("ConstantOfShape", [shape_input], ["c"], value=_declared("v", [1], [value]))


def _folded(op: str, inputs, **attrs):
    """``op`` on constants, then ReduceSum and Add onto x: a model whose output is small whatever ``op`` makes."""
    return [helper.make_node(op, inputs, ["t"], **attrs), helper.make_node("ReduceSum", ["t"], ["s"], keepdims=0),
            helper.make_node("Add", ["x", "s"], ["y"])]


def _external(name: str, dims, location: str, offset: int = 0, length: int | None = None) -> TensorProto:
    tensor = TensorProto()
    tensor.name, tensor.data_type = name, TensorProto.FLOAT
    tensor.dims.extend(dims)
    tensor.data_location = TensorProto.EXTERNAL
    fields = {"location": location, "offset": str(offset)}
    if length is not None:
        fields["length"] = str(length)
    for key, value in fields.items():
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def onnx_cases(d: Path, secret: Path) -> dict[str, tuple[Path, list[str]]]:
    """name -> (model, words its one-line refusal must contain)."""
    short = TensorProto()
    short.name, short.data_type, short.raw_data = "w", TensorProto.FLOAT, b"\0" * 15
    short.dims.extend([1, 4])
    big_constant = helper.make_node("Constant", [], ["w"], value=_declared("v", [1 << 28], [1.0]))
    add_w = helper.make_node("Add", ["x", "w"], ["y"])
    (d / "sub").mkdir()
    os.symlink(secret, d / "link.bin")
    os.symlink(secret.parent, d / "linkdir")
    (d / "short.bin").write_bytes(b"\0" * 8)
    shape_of_x = [helper.make_node("Shape", ["x"], ["sh"]), _filled("sh"),
                  helper.make_node("ReduceSum", ["c"], ["y"], keepdims=0)]
    expand = [helper.make_node("Expand", ["one", "shp"], ["e"]), helper.make_node("Add", ["x", "e"], ["y"])]
    gather = [helper.make_node("Gather", ["c", "idx"], ["g"]), helper.make_node("Add", ["x", "g"], ["y"])]
    ranges = ["s0", "l", "dl"]

    def external(name, location, dims=(8,), **where):
        return _save(d / f"{name}.onnx", [add_w], [_external("w", list(dims), location, **where)], x_shape=(1, *dims))

    return {
        # 136 bytes -> a 1 GiB constant (and a 1 GiB .data) before
        "constant_of_shape": (_save(d / "cos.onnx", [_filled("shape"), helper.make_node("Add", ["x", "c"], ["y"])],
                                    [_i64("shape", [1 << 28])], x_shape=(1,)), ["ConstantOfShape", "512.0 MiB"]),
        "expand": (_save(d / "expand.onnx", expand, [_f32("one", 1.0), _i64("shp", [1 << 14, 1 << 14])],
                         x_shape=(1, 1)), ["Expand", "1.0 GiB"]),
        "tile": (_save(d / "tile.onnx", _folded("Tile", ["c", "rep"]), [_f32("c", [1.0]), _i64("rep", [1 << 34])]),
                 ["Tile", "64.0 GiB"]),
        "pad": (_save(d / "pad.onnx", _folded("Pad", ["c", "p"]), [_f32("c", [1.0]), _i64("p", [0, 1 << 33])]),
                ["Pad", "32.0 GiB"]),
        "range": (_save(d / "range.onnx", _folded("Range", ranges), [_f32("s0", 0), _f32("l", 2.0**36), _f32("dl", 1)]),
                  ["Range", "256.0 GiB"]),
        "range_infinite": (_save(d / "range_inf.onnx", _folded("Range", ranges),
                                 [_f32("s0", 0), _f32("l", np.inf), _f32("dl", 1)]), ["Range", "finite"]),
        "resize": (_save(d / "resize.onnx", _folded("Resize", ["c", "", "sc"], mode="nearest"),
                         [_f32("c", np.ones((1, 1, 1, 1))), _f32("sc", [1, 1, 2.0**20, 2.0**20])]), ["Resize", "TiB"]),
        "gather_index": (_save(d / "gather.onnx", gather, [_f32("c", [1, 2, 3, 4]), _i64("idx", [1 << 40])]),
                         ["Gather", "out of range"]),
        # the shape of a 4 TiB input costs nothing; filling it is refused
        "shape_of_huge_input": (_save(d / "shape.onnx", shape_of_x, [], x_shape=(1 << 20, 1 << 20)),
                                ["ConstantOfShape", "TiB"]),
        "dropout_mask": (_save(d / "dropout.onnx", [helper.make_node("Dropout", ["x"], ["y", "m"])], [],
                               x_shape=(1 << 15, 1 << 15), outputs=("y", "m")), ["Dropout", "mask", "1.0 GiB"]),
        "initializer_dims": (_save(d / "init_dims.onnx", [add_w], [_declared("w", [1 << 28], [1.0])], x_shape=(1,)),
                             ["initializer 'w'", "GiB"]),
        "initializer_values": (_save(d / "init_values.onnx", [add_w], [_declared("w", [1, 4], [1.0, 2.0])]),
                               ["initializer 'w'", "4 values", "holds 2"]),
        "initializer_raw": (_save(d / "init_raw.onnx", [add_w], [short]), ["initializer 'w'", "16 bytes", "15"]),
        "constant_attribute": (_save(d / "const_attr.onnx", [big_constant, add_w], [], x_shape=(1,)),
                               ["Constant", "GiB"]),
        "external_absolute": (external("ext_abs", str(secret)), ["tensor 'w'", "relative path"]),
        "external_dotdot": (external("sub/ext_dotdot", "../../secret/" + secret.name), ["tensor 'w'", "'..'"]),
        "external_symlink": (external("ext_link", "link.bin"), ["tensor 'w'", "symbolic link"]),
        "external_symlinked_folder": (external("ext_linkdir", "linkdir/" + secret.name),
                                      ["tensor 'w'", "symbolic link"]),
        "external_beyond_file": (external("ext_short", "short.bin", (4,), offset=4),
                                 ["tensor 'w'", "offset 4", "20 bytes", "only 8"]),
        "external_length": (external("ext_len", "short.bin", (4,), length=8), ["tensor 'w'", "length is 8"]),
    }


@pytest.fixture
def secret(tmp_path) -> Path:
    path = tmp_path / "secret" / "secret.bin"
    path.parent.mkdir()
    path.write_bytes(SECRET)
    return path


def _no_secret(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.name != "secret.bin":
            assert SECRET[:8] not in path.read_bytes(), f"secret bytes in {path}"


def test_onnx_crafted_files_refused_before_allocating(tmp_path, secret):
    work = tmp_path / "work"
    work.mkdir()
    cases = onnx_cases(work, secret)
    out = tmp_path / "out"
    argv = [["import", "onnx", "--model", model, "--output-model", out / f"{name}.json",
             "--output-data", out / f"{name}.data"] for name, (model, _) in cases.items()]
    results = run_many(argv, cwd=work, address_space=6 * 2**30)
    assert_each_refused(cases, results)
    assert not out.exists(), sorted(out.rglob("*"))
    _no_secret(tmp_path)


def test_onnx_legitimate_folding_and_external_data_agree_with_onnxruntime(tmp_path):
    """The same ops at ordinary sizes fold, external data inside the folder is read, and the results equal
    onnxruntime's; the budget is --max-tensor-bytes (a 4 MiB ConstantOfShape is refused under 1M, taken at 8M)."""
    import onnxruntime

    weights = np.arange(8, dtype=np.float32) / 8
    (tmp_path / "weights.bin").write_bytes(b"\0" * 12 + weights.tobytes())
    nodes = [_filled("shape", 0.5), helper.make_node("Tile", ["c", "rep"], ["t"]),
             helper.make_node("Pad", ["t", "p"], ["pp"]), helper.make_node("Add", ["x", "w"], ["a"]),
             helper.make_node("Add", ["a", "pp"], ["y"])]
    inits = [_i64("shape", [1, 2]), _i64("rep", [1, 2]), _i64("p", [0, 2, 0, 2]),
             _external("w", [8], "weights.bin", 12, 32)]
    model = _save(tmp_path / "ok.onnx", nodes, inits, x_shape=(1, 8))
    big = _save(tmp_path / "cos4m.onnx", _folded("ConstantOfShape", ["shape"]), [_i64("shape", [1 << 20])])
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
    np.save(tmp_path / "x.npy", x)
    results = run_many([
        ["import", "onnx", "--model", model, "--output-model", "ok.json", "--output-data", "ok.data"],
        ["inference", "--model", "ok.json", "--model-data", "ok.data", "--input", "x.npy", "--output-dir", "res",
         "--postprocess", "dump_result"],
        ["--max-tensor-bytes", "1M", "import", "onnx", "--model", big, "--output-model", "b1.json"],
        ["--max-tensor-bytes", "8M", "import", "onnx", "--model", big, "--output-model", "b8.json"],
    ], cwd=tmp_path)
    assert [r.code for r in results] == [0, 0, 2, 0], [r.stderr for r in results]
    assert_refused(results[2], "ConstantOfShape", "4.0 MiB")
    expected = onnxruntime.InferenceSession(str(model)).run(None, {"x": x})[0]
    got = np.load(tmp_path / "res" / "outputs.npz")["y"] if (tmp_path / "res" / "outputs.npz").exists() else None
    if got is None:  # dump_result writes one file per output
        dumps = sorted((tmp_path / "res").rglob("*y*"))
        got = np.loadtxt(dumps[0], dtype=np.float32).reshape(expected.shape)
    np.testing.assert_allclose(got.reshape(expected.shape), expected, rtol=1e-6)


def _pb_sample(path: Path, location: str, dims=(1, 8)) -> Path:
    path.write_bytes(_external("x", list(dims), location).SerializeToString())
    return path


def test_pb_sample_external_data_stays_in_the_samples_folder(tmp_path, secret):
    """A .pb sample's external data resolves against the sample's folder, never the current directory, and may
    not leave it; a .npy whose header declares more than the budget (or than the file holds) is refused."""
    from numpy.lib import format as npy

    model = _save(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"])], [], x_shape=(1, 8))
    work = tmp_path / "work"
    samples = work / "samples"
    samples.mkdir(parents=True)
    (work / "secret.bin").write_bytes(SECRET)       # in the current directory: what the old reader took
    os.symlink(secret, samples / "link.bin")
    cases = {
        "relative_to_cwd": (_pb_sample(samples / "rel.pb", "secret.bin"), ["not found", "samples"]),
        "dotdot": (_pb_sample(samples / "up.pb", "../secret.bin"), ["'..'"]),
        "absolute": (_pb_sample(samples / "abs.pb", str(secret)), ["relative path"]),
        "symlink": (_pb_sample(samples / "link.pb", "link.bin"), ["symbolic link"]),
    }
    huge = work / "huge.npy"
    with open(huge, "wb") as handle:
        npy.write_array_header_1_0(handle, {"descr": "<f4", "fortran_order": False, "shape": (1 << 36,)})
        handle.write(b"\0" * 16)
    short = work / "short.npy"
    with open(short, "wb") as handle:
        npy.write_array_header_1_0(handle, {"descr": "<f4", "fortran_order": False, "shape": (1, 8)})
        handle.write(b"\0" * 16)
    cases["npy_huge"] = (huge, ["huge.npy", "256.0 GiB"])
    cases["npy_short"] = (short, ["short.npy", "32 bytes", "only 16"])
    (samples / "ok.bin").write_bytes(np.arange(8, dtype=np.float32).tobytes())
    ok = _pb_sample(samples / "ok.pb", "ok.bin")
    argv = [["import", "onnx", "--model", model, "--output-model", "m.json", "--output-data", "m.data"]]
    argv += [["inference", "--model", "m.json", "--model-data", "m.data", "--input", sample,
              "--output-dir", f"out_{name}"] for name, (sample, _) in cases.items()]
    argv.append(["inference", "--model", "m.json", "--model-data", "m.data", "--input", ok, "--output-dir", "out_ok"])
    results = run_many(argv, cwd=work)
    assert results[0].code == 0, results[0].stderr
    for (name, (_, words)), result in zip(cases.items(), results[1:]):
        try:
            assert_refused(result, *words)
        except AssertionError as exc:
            raise AssertionError(f"case {name}: {exc}") from None
        assert not (work / f"out_{name}").exists()
    assert results[-1].code == 0, results[-1].stderr
    np.testing.assert_array_equal(np.load(work / "out_ok" / "outputs.npz")["y"].reshape(-1), np.arange(8))
    _no_secret(work)


# ---- TFLite ---------------------------------------------------------------------------------------------------

def _tflite_cases(folder: Path) -> dict[str, tuple[bytes, list[str]]]:
    from ai_edge_litert import schema_py_generated as fb

    from tests.importers.tflite.flatbuffer import ModelBuilder, options

    def add_model(shape_w, *, dtype="float32", data=None, variable=False, scale=None, zero=None, axis=0,
                  sparsity=None, x_dtype="float32", x_quant=None):
        b = ModelBuilder()
        x = b.tensor("x", [1, 4], x_dtype, **(x_quant or {}))
        w = b.tensor("w", shape_w, dtype, data, scale=scale, zero_point=zero, axis=axis, variable=variable)
        b.tensors[w].sparsity = sparsity
        y = b.tensor("y", [1, 4], x_dtype, **(x_quant or {}))
        b.op("ADD", [x, w], [y], options("AddOptions"))
        return b.build([x], [y])

    def csr(n, dense0=1):
        def dim(fmt, size=0, segments=None, indices=None):
            d = fb.DimensionMetadataT()
            d.format, d.denseSize = fmt, size
            if segments is not None:
                vector = fb.Int32VectorT()
                vector.values = segments
                index = fb.Int32VectorT()
                index.values = indices
                d.arraySegmentsType, d.arraySegments = fb.SparseIndexVector.Int32Vector, vector
                d.arrayIndicesType, d.arrayIndices = fb.SparseIndexVector.Int32Vector, index
            return d
        params = fb.SparsityParametersT()
        params.traversalOrder = [0, 1]
        params.dimMetadata = [dim(fb.DimensionType.DENSE, dense0), dim(fb.DimensionType.SPARSE_CSR, 0, [0, 1], [0])]
        return params

    def fill_model():
        b = ModelBuilder()
        x = b.tensor("x", [1, 4])
        dims = b.const("dims", np.int32([1 << 15, 1 << 15]))
        value = b.const("value", np.float32(1.0))
        f = b.tensor("f", [0, 0])
        y = b.tensor("y", [1, 4])
        b.op("FILL", [dims, value], [f])
        b.op("ADD", [x, f], [y], options("AddOptions"))
        return b.build([x], [y])

    def weights_fc(scale, axis):
        b = ModelBuilder()
        x = b.tensor("x", [1, 4])
        w = b.const("w", np.arange(16, dtype=np.int8).reshape(4, 4), scale=scale, zero_point=[0] * len(scale),
                    axis=axis)
        y = b.tensor("y", [1, 4])
        b.op("FULLY_CONNECTED", [x, w, -1], [y], options("FullyConnectedOptions"))
        return b.build([x], [y])

    def pre_quantized(scale, zero=0):
        quant = {"scale": [scale], "zero_point": [zero]}
        return add_model([1, 4], dtype="int8", data=np.int8([1, 2, 3, 4]), scale=[scale], zero=[zero],
                         x_dtype="int8", x_quant=quant)

    seven = np.float32([7])
    return {
        "sparse_16k": (add_model([16384, 16384], data=seven, sparsity=csr(16384)), ["tensor 'w'", "1.0 GiB"]),
        "sparse_1m": (add_model([1 << 20, 1 << 20], data=seven, sparsity=csr(1 << 20)), ["tensor 'w'", "TiB"]),
        "sparse_dense_size": (add_model([1, 4], data=seven, sparsity=csr(4, dense0=2**31 - 1)), ["'w'", "dense_size"]),
        "fill": (fill_model(), ["FILL", "4.0 GiB"]),
        "variable_negative": (add_model([-3, 4], variable=True), ["tensor 'w'", "negative dimension"]),
        "variable_huge": (add_model([16384, 16384], variable=True), ["tensor 'w'", "1.0 GiB"]),
        "constant_negative": (add_model([-1, -4], data=np.zeros(4, np.float32)), ["tensor 'w'", "negative"]),
        "scales_for_channels": (weights_fc([0.1, 0.2, 0.3], 0), ["tensor 'w'", "3 per-channel scales for 4 channels"]),
        "quantized_dimension": (weights_fc([0.1] * 4, 7), ["tensor 'w'", "quantized_dimension 7"]),
        "scale_nan": (pre_quantized(float("nan")), ["tensor 'x'", "scale nan"]),
        "scale_inf": (pre_quantized(float("inf")), ["tensor 'x'", "scale inf"]),
        "scale_zero": (pre_quantized(0.0), ["tensor 'x'", "scale 0.0"]),
        "scale_subnormal": (pre_quantized(1e-45), ["tensor 'x'", "not a positive finite"]),
        "zero_point_range": (pre_quantized(0.5, 300), ["tensor 'x'", "zero point 300"]),
    }


def test_tflite_crafted_files_refused(tmp_path):
    cases = _tflite_cases(tmp_path)
    out = tmp_path / "out"
    argv = []
    for name, (data, _) in cases.items():
        (tmp_path / f"{name}.tflite").write_bytes(data)
        argv.append(["import", "tflite", "--model", tmp_path / f"{name}.tflite", "--output-model", out / f"{name}.json",
                     "--output-data", out / f"{name}.data"])
    results = run_many(argv, cwd=tmp_path, address_space=6 * 2**30)
    assert_each_refused(cases, results)
    assert not out.exists(), sorted(out.rglob("*"))


def test_tflite_shape_of_huge_input_costs_nothing(tmp_path):
    """SHAPE of a declared [2^31-1, 2^31-1] input folds without allocating the input (it was an internal error):
    the import succeeds with the usual one-line warning that no bundle can hold the input."""
    from tests.importers.tflite.flatbuffer import ModelBuilder

    b = ModelBuilder()
    x = b.tensor("x", [2**31 - 1, 2**31 - 1])
    shape = b.tensor("shape", [2], "int32")
    b.op("SHAPE", [x], [shape])
    (tmp_path / "m.tflite").write_bytes(b.build([x], [shape]))
    (result,) = run_many([["import", "tflite", "--model", tmp_path / "m.tflite"]], cwd=tmp_path,
                         address_space=6 * 2**30)
    assert result.code == 0 and "Traceback" not in result.stderr, result.stderr
    assert len(result.lines) == 1 and result.lines[0].startswith("warning: tensor 'x'"), result.stderr
