"""Caffe and Darknet files that declare more than they hold (issue 37).

Caffe: a prototxt alone gets seeded random weights of the shapes it implies, so ``num_output: 2^29`` (2 GiB)
or a 65536 x 3 x 64 x 64 convolution would be drawn; a caffemodel blob may declare [2^62 + 1, 4] (the int64
product wraps to 4), negative dimensions, or 63 bytes of float32 raw_data. Darknet: a cfg's ``[connected]
output=2^28`` over a 20-byte weights file used to allocate gigabytes of zeros before saying "too short";
a 16-byte weights file failed inside NumPy. Every file is written here, all run in one pegasus process
under the address-space limit, and each must exit 2 with one line naming the layer or blob (a cfg whose
huge sizes are activations only, declared and never allocated at import, must just stay within bounds). Small legitimate
networks written the same way still import and compute what the layer means (checked with NumPy).
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from pegasus.importers.caffe.proto import message_classes
from tests.security.harness import assert_refused, run_many

HEADER = struct.pack("<iiiq", 0, 2, 5, 0)   # major, minor, revision, seen (int64 from version 0.2 on)


def _prototxt(folder: Path, name: str, input_shape: list[int], layer: str) -> Path:
    path = folder / f"{name}.prototxt"
    dims = " ".join(f"dim: {d}" for d in input_shape)
    path.write_text(f'name: "{name}"\ninput: "data"\ninput_shape {{ {dims} }}\nlayer {{ {layer} }}\n')
    return path


def _caffemodel(folder: Path, name: str, kernel: dict, bias: dict | None = None) -> Path:
    """An InnerProduct layer 'fc' whose first blob gets the fields of ``kernel`` (shape, data, raw_data...)."""
    net = message_classes("caffe")["NetParameter"]()
    layer = net.layer.add()
    layer.name, layer.type = "fc", "InnerProduct"
    for fields in (kernel, bias or {"shape": [4], "data": [0.25, -0.5, 1.0, 2.0]}):
        blob = layer.blobs.add()
        for key, value in fields.items():
            if key == "shape":
                blob.shape.dim.extend(value)
            elif key in ("data", "double_data"):
                getattr(blob, key).extend(value)
            else:
                setattr(blob, key, value)
    path = folder / f"{name}.caffemodel"
    path.write_bytes(net.SerializeToString())
    return path


FC4 = 'name: "fc" type: "InnerProduct" bottom: "data" top: "fc" inner_product_param { num_output: 4 }'
KERNEL = (np.arange(16, dtype=np.float32).reshape(4, 4) - 8) / 5


def _caffe_cases(folder: Path) -> list[tuple[list, tuple[str, ...]]]:
    huge_fc = _prototxt(folder, "huge_fc", [1, 4], FC4.replace("num_output: 4", f"num_output: {2**27}"))
    conv = _prototxt(folder, "conv", [1, 3, 8, 8], 'name: "cv" type: "Convolution" bottom: "data" top: "cv" '
                     "convolution_param { num_output: 65536 kernel_size: 64 pad: 32 }")
    deconv = _prototxt(folder, "deconv", [1, 3, 8, 8], 'name: "dc" type: "Deconvolution" bottom: "data" top: "dc" '
                       "convolution_param { num_output: 1048576 kernel_size: 32 }")
    reshape = _prototxt(folder, "reshape", [1, 4], 'name: "rs" type: "Reshape" bottom: "data" top: "rs" '
                        f"reshape_param {{ shape {{ dim: {2**62 + 1} dim: 4 }} }}")
    fc4 = _prototxt(folder, "fc4", [1, 4], FC4)
    blobs = {
        "wrap": ({"shape": [2**62 + 1, 4], "data": [0.5] * 4}, ("blob 0 of layer 'fc'", "[4611686018427387905, 4]")),
        "negative": ({"shape": [-1, -4], "data": [0.5] * 4}, ("blob 0 of layer 'fc'", "negative dimension")),
        "raw_odd": ({"shape": [4, 4], "raw_data": b"\0" * 63, "raw_data_type": 1}, ("blob 0", "63 bytes", "float32")),
        "legacy_negative": ({"num": -1, "channels": -1, "height": 4, "width": 4, "data": [0.5] * 16},
                            ("blob 0 of layer 'fc'", "negative dimension")),
        "fewer": ({"shape": [4, 4], "data": [0.5] * 15}, ("blob 0 of layer 'fc'", "15 values", "(16 values)")),
        "declared_only": ({"shape": [2**28], "data": [0.5]}, ("blob 0 of layer 'fc'", "[268435456]",
                                                             "--max-tensor-bytes")),
    }
    cases = [(["--model", huge_fc], ("huge_fc.prototxt", "layer 'fc'", "weights", "[134217728, 4]")),
             (["--model", conv], ("conv.prototxt", "layer 'cv'", "[65536, 3, 64, 64]")),
             (["--model", deconv], ("deconv.prototxt", "layer 'dc'", "[3, 1048576, 32, 32]")),
             (["--model", reshape], ("reshape.prototxt", "'rs'", "[4611686018427387905, 4]"))]
    for name, (kernel, words) in blobs.items():
        weights = _caffemodel(folder, name, kernel)
        cases.append((["--model", fc4, "--weights", weights], (f"{name}.caffemodel",) + words))
    return [(["import", "caffe", *argv], words) for argv, words in cases]


def _darknet_cases(folder: Path) -> list[tuple[list, tuple[str, ...]]]:
    def cfg(name: str, net: str, layer: str) -> Path:
        path = folder / f"{name}.cfg"
        path.write_text(f"[net]\nbatch=1\n{net}\n\n{layer}\n")
        return path

    empty = folder / "empty.weights"
    empty.write_bytes(HEADER)
    sixteen = folder / "sixteen.weights"
    sixteen.write_bytes(HEADER[:16])
    plenty = folder / "plenty.weights"   # 2^20 floats: enough for the layer, more than a 1 MiB budget allows
    plenty.write_bytes(HEADER + bytes(4 * 2**20))
    one = "height=1\nwidth=1\nchannels=1"
    big_fc = cfg("big_fc", one, f"[connected]\noutput={2**28}\nactivation=linear")
    big_conv = cfg("big_conv", "height=8\nwidth=8\nchannels=3",
                   "[convolutional]\nfilters=65536\nsize=63\npad=1\nactivation=linear")
    mid_fc = cfg("mid_fc", one, f"[connected]\noutput={2**19}\nactivation=linear")
    huge_input = cfg("huge_input", "height=1000000\nwidth=1000000\nchannels=3", "[maxpool]\nsize=2\nstride=2")
    upsample = cfg("upsample", "height=8\nwidth=8\nchannels=3", "[upsample]\nstride=1000000")
    cases = [([big_fc, empty], ("empty.weights", "too short for big_fc.cfg", "connected_0, line 7")),
             ([big_fc, sixteen], ("sixteen.weights", "not a Darknet weights file", "16 bytes")),
             ([big_conv, empty], ("empty.weights", "too short for big_conv.cfg", "conv_0")),
             ([mid_fc, plenty, "--max-tensor-bytes", "1M"], ("mid_fc.cfg", "layer connected_0 (line 7)",
                                                             "--max-tensor-bytes")),
             # activations are only declared at import (nothing allocated): refused or let through, in bounds
             ([huge_input, empty], None),
             ([upsample, empty], None)]
    return [(["import", "darknet", "--model", model, "--weights", weights, *extra], words)
            for (model, weights, *extra), words in cases]


def test_crafted_caffe_and_darknet_files_are_refused_by_name(tmp_path):
    cases = _caffe_cases(tmp_path) + _darknet_cases(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    argvs = [[*argv, "--output-model", out / f"m{i}.json", "--output-data", out / f"m{i}.data"]
             for i, (argv, _) in enumerate(cases)]
    results = run_many(argvs, cwd=tmp_path)
    for (argv, words), result in zip(cases, results):
        if words is None:
            assert result.code in (0, 2) and "Traceback" not in result.stderr, (argv, result.stderr[-2000:])
            continue
        assert_refused(result, *words)
    refused = {f"m{i}" for i, (_, words) in enumerate(cases) if words is not None}
    assert not [p for p in out.iterdir() if p.stem in refused]


def test_legitimate_models_still_import(tmp_path):
    """An InnerProduct with its caffemodel (float data, and float16 raw_data) and a Darknet [connected] layer
    with exactly its floats compute W x + b."""
    from pegasus.importers.caffe.loader import import_caffe
    from pegasus.importers.darknet.loader import import_darknet
    from pegasus.runtime.interpreter import run

    x = np.random.default_rng(1).standard_normal((1, 4)).astype(np.float32)
    bias = np.array([0.25, -0.5, 1.0, 2.0], np.float32)
    fc4 = _prototxt(tmp_path, "fc4", [1, 4], FC4)
    plain = _caffemodel(tmp_path, "plain", {"shape": [4, 4], "data": KERNEL.ravel().tolist()})
    half = _caffemodel(tmp_path, "half", {"shape": [4, 4], "raw_data": KERNEL.astype("<f2").tobytes(),
                                          "raw_data_type": 2})
    for weights in (plain, half):
        graph = import_caffe(fc4, weights)
        np.testing.assert_allclose(run(graph, {"data": x})["fc"], x @ KERNEL.T + bias, rtol=1e-3, atol=1e-3)
    random = import_caffe(fc4)   # no caffemodel: seeded random weights, within the budget
    assert run(random, {"data": x})["fc"].shape == (1, 4)

    cfg = tmp_path / "fc.cfg"
    cfg.write_text("[net]\nbatch=1\nheight=1\nwidth=1\nchannels=4\n\n[connected]\noutput=4\nactivation=linear\n")
    weights = tmp_path / "fc.weights"
    weights.write_bytes(HEADER + bias.tobytes() + KERNEL.tobytes())
    graph = import_darknet(cfg, weights)
    y = run(graph, {"data": x.reshape(1, 4, 1, 1)})[graph.outputs[0]]
    np.testing.assert_allclose(y.reshape(1, 4), x @ KERNEL.T + bias, rtol=1e-5, atol=1e-5)
    results = run_many([["import", "caffe", "--model", fc4, "--weights", plain, "--output-model",
                         tmp_path / "c.json", "--output-data", tmp_path / "c.data"],
                        ["import", "darknet", "--model", cfg, "--weights", weights, "--output-model",
                         tmp_path / "d.json", "--output-data", tmp_path / "d.data"]], cwd=tmp_path)
    assert [r.code for r in results] == [0, 0], [r.stderr for r in results]
