"""fold_batchnorm folds a BatchNormalization (which normalizes axis 1) into a Conv only when axis 1 is the
Conv's output channels: after a channels-last Conv axis 1 is the height, so folding per output channel
would scale the wrong axis (it did whenever the height equalled the channel count)."""

from __future__ import annotations

import numpy as np

from pegasus.ir.builder import GraphBuilder
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph
from pegasus.ir.tensor import TensorType
from pegasus.passes.pipeline import run_import_passes
from pegasus.runtime.interpreter import run


def test_batchnorm_on_the_height_of_a_channels_last_conv_is_not_folded():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 4, 6, 3)).astype(np.float32)          # NHWC, height 4
    w = rng.standard_normal((4, 3, 1, 1)).astype(np.float32)          # 4 output channels: as many as rows
    scale, bias, mean = (rng.uniform(0.5, 1.5, 4).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.5, 1.5, 4).astype(np.float32)
    graph = Graph("g")
    b = GraphBuilder(graph)
    b.add_input("x", TensorType(x.shape, DType.FLOAT32))
    conv = b.emit("Conv", ["x", b.add_constant("w", w)], {"channels_last": True}, name="conv")[0]
    params = [b.add_constant(n, v) for n, v in (("scale", scale), ("bias", bias), ("mean", mean), ("var", var))]
    b.emit("BatchNormalization", [conv, *params], {"epsilon": 1e-3}, name="bn", outputs=["y"])
    graph.outputs = ["y"]
    run_import_passes(graph)

    y = np.einsum("nhwc,mc->nhwm", x.astype(np.float64), w[:, :, 0, 0].astype(np.float64))
    per_row = (1, 4, 1, 1)   # BatchNormalization's axis 1: the rows
    k = (scale / np.sqrt(var.astype(np.float64) + 1e-3)).reshape(per_row)
    expected = (y - mean.reshape(per_row)) * k + bias.reshape(per_row)
    np.testing.assert_allclose(run(graph, {"x": x})["y"], expected, rtol=1e-5, atol=1e-5)
    assert [n.op for n in graph.nodes] == ["Conv", "BatchNormalization"]
