"""Per-layer speed of single float convolutions: the host bundle against onnxruntime (1 thread), timed
alternately in the same run, as GF/s (2 * MACs per second) of each.

One Conv (+ Relu) layer per shape, built as ONNX with random weights, imported and exported for this
machine like any model; the two are called in turns, ``--rounds`` rounds of ``--runs`` calls each, and the
medians of the rounds are printed. Used to choose and check the float convolution kernels
(exporters/glow/kernels/conv*.py) shape by shape.

    python benchmarks/bench_conv_layers.py [--shapes vgg,resnet,inception] [--runs 20] [--rounds 5]
    python benchmarks/bench_conv_layers.py --model inception_v2     # every Conv shape of a light model

With ``--model``, the shapes are those of the light model's Conv nodes (square inputs and kernels,
symmetric pads, as in the light models), each once with how often it occurs, and the last column is what
the model loses (+) or gains (-) on them: count * (bundle - onnxruntime) us.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_glow import models  # noqa: E402
from timing import median_us  # noqa: E402

from pegasus.importers.onnx.loader import import_onnx  # noqa: E402
from tests.support.host_runner import load_bundle  # noqa: E402

# (name, input channels, output channels, height = width, kernel, stride, pad[, "pool": a 2x2 MaxPool after the Relu])
SHAPES = {
    "vgg": [("vgg 3x3 64@224", 64, 64, 224, 3, 1, 1), ("vgg 3x3 128@112", 128, 128, 112, 3, 1, 1),
            ("vgg 3x3 256@56", 256, 256, 56, 3, 1, 1), ("vgg 3x3 512@28", 512, 512, 28, 3, 1, 1),
            ("vgg 3x3 512@14", 512, 512, 14, 3, 1, 1), ("vgg 3x3 3->64@224", 3, 64, 224, 3, 1, 1),
            ("vgg 3x3 64@224 +pool", 64, 64, 224, 3, 1, 1, "pool"),
            ("vgg 3x3 128@112 +pool", 128, 128, 112, 3, 1, 1, "pool"),
            ("vgg 3x3 256@56 +pool", 256, 256, 56, 3, 1, 1, "pool"),
            ("vgg 3x3 512@28 +pool", 512, 512, 28, 3, 1, 1, "pool"),
            ("vgg 3x3 512@14 +pool", 512, 512, 14, 3, 1, 1, "pool")],
    "resnet": [("rn 1x1 64->256@56", 64, 256, 56, 1, 1, 0), ("rn 1x1 256->64@56", 256, 64, 56, 1, 1, 0),
               ("rn 3x3 64@56", 64, 64, 56, 3, 1, 1), ("rn 3x3 128@28", 128, 128, 28, 3, 1, 1),
               ("rn 1x1 512->128@28", 512, 128, 28, 1, 1, 0), ("rn 3x3 256@14", 256, 256, 14, 3, 1, 1),
               ("rn 1x1 1024->256@14", 1024, 256, 14, 1, 1, 0), ("rn 3x3 512@7", 512, 512, 7, 3, 1, 1),
               ("rn 1x1 512->2048@7", 512, 2048, 7, 1, 1, 0), ("rn 1x1 2048->512@7", 2048, 512, 7, 1, 1, 0)],
    "inception": [("inc 3x3 64->192@56", 64, 192, 56, 3, 1, 1), ("inc 3x3 96->128@28", 96, 128, 28, 3, 1, 1),
                  ("inc 3x3 128->192@14", 128, 192, 14, 3, 1, 1), ("inc 3x3 192->256@7", 192, 256, 7, 3, 1, 1),
                  ("inc 1x1 1024->352@7", 1024, 352, 7, 1, 1, 0)],
}


def model_shapes(name: str) -> list[tuple[tuple, int]]:
    """(shape tuple as in SHAPES, count) of the Conv nodes of light model ``name``, in first-seen order."""
    model = onnx.shape_inference.infer_shapes(onnx.load(str(models()[name])))
    dims = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
            for vi in [*model.graph.value_info, *model.graph.input]}
    dims.update({init.name: list(init.dims) for init in model.graph.initializer})
    counts: dict[tuple, int] = {}
    for node in (n for n in model.graph.node if n.op_type == "Conv"):
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        x, w = dims[node.input[0]], dims[node.input[1]]
        stride, pad = attrs.get("strides", [1, 1])[0], attrs.get("pads", [0] * 4)[0]
        shape = (f"{w[2]}x{w[3]} s{stride} {w[1]}->{w[0]}@{x[2]}", w[1], w[0], x[2], w[2], stride, pad)
        counts[shape] = counts.get(shape, 0) + 1
    return list(counts.items())


def conv_model(cin: int, cout: int, size: int, kernel: int, stride: int, pad: int, pool: str = "") -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(0, 0.05, (cout, cin, kernel, kernel)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.normal(0, 0.1, (cout,)).astype(np.float32), "b")
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[kernel, kernel], strides=[stride, stride],
                            pads=[pad] * 4)
    out = (size + 2 * pad - kernel) // stride + 1
    nodes = [conv, helper.make_node("Relu", ["c"], ["r" if pool else "y"])]
    if pool:
        nodes.append(helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2]))
        out //= 2
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                   [1, cin, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, out, out])], [w, bias])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def measure(shape: tuple, runs: int, rounds: int) -> dict:
    name, cin, cout, size, kernel, stride, pad, *pool = shape
    model = conv_model(cin, cout, size, kernel, stride, pad, *pool)
    x = np.random.default_rng(1).uniform(-1, 1, (1, cin, size, size)).astype(np.float32)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})[0]
    out = (size + 2 * pad - kernel) // stride + 1
    flops = 2 * cin * cout * kernel * kernel * out * out     # of the convolution (a pooling adds little)
    with tempfile.TemporaryDirectory() as tmp:
        bundle = load_bundle(import_onnx(model, name="conv"), {"x": x}, Path(tmp))
        bundle()
        got = bundle.outputs()["y"]
        error = float(np.max(np.abs(got - expected)))
        ours, theirs = [], []
        for _ in range(rounds):
            ours.append(median_us(bundle, runs))
            theirs.append(median_us(lambda: session.run(None, {"x": x}), runs))
    us, ort_us = statistics.median(ours), statistics.median(theirs)
    return {"name": name, "bundle_gfs": flops / us / 1e3, "ort_gfs": flops / ort_us / 1e3, "bundle_us": us,
            "ort_us": ort_us, "error": error}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="vgg,resnet,inception")
    parser.add_argument("--only", default="", help="substring of the shape names to keep")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model", default="", help="the Conv shapes of this light model instead")
    args = parser.parse_args()
    if args.model:
        print(f"{'layer':26s} {'n':>3s} {'bundle us':>10s} {'ort us':>9s} {'ort/bundle':>11s} {'n*diff us':>10s}")
        total = 0.0
        for shape, count in model_shapes(args.model):
            if args.only and args.only not in shape[0]:
                continue
            row = measure(shape, args.runs, args.rounds)
            total += count * (row["bundle_us"] - row["ort_us"])
            print(f"{row['name']:26s} {count:3d} {row['bundle_us']:10.1f} {row['ort_us']:9.1f} "
                  f"{row['ort_us'] / row['bundle_us']:10.2f}x {count * (row['bundle_us'] - row['ort_us']):10.1f}",
                  flush=True)
        print(f"{'total':26s} {'':3s} {'':10s} {'':9s} {'':11s} {total:10.1f}")
        return
    print(f"{'layer':22s} {'bundle GF/s':>12s} {'ort GF/s':>9s} {'ort/bundle':>11s} {'max |diff|':>11s}")
    for family in args.shapes.split(","):
        for shape in SHAPES[family]:
            if args.only and args.only not in shape[0]:
                continue
            row = measure(shape, args.runs, args.rounds)
            print(f"{row['name']:22s} {row['bundle_gfs']:12.1f} {row['ort_gfs']:9.1f} "
                  f"{row['ort_us'] / row['bundle_us']:10.2f}x {row['error']:11.2e}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
