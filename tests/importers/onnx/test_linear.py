"""Matrix products as other tools write them: torch.einsum's Einsum nodes (attention scores, a projection by a
weight), against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.importers.onnx.harness import check, make_model


@pytest.mark.parametrize("equation, shapes", [
    ("bnc,cd->bnd", [(1, 5, 8), (8, 6)]),            # a projection by a weight (initializer)
    ("bhqd,bhkd->bhqk", [(1, 3, 5, 4), (1, 3, 7, 4)]),  # attention scores
    ("bij,bjk", [(2, 3, 4), (2, 4, 5)]),              # implicit output
    ("...qc,kc->...qk", [(1, 2, 5, 6), (3, 6)]),      # ellipsis
    ("bnc->bc", [(1, 5, 8)]),                         # a sum
])
def test_einsum(tmp_path, equation, shapes):
    rng = np.random.default_rng(3)
    names = [f"x{i}" for i in range(len(shapes))]
    batch = "batch_size" if shapes[0][0] == 1 else shapes[0][0]
    inputs = [helper.make_tensor_value_info(names[0], TensorProto.FLOAT, [batch, *shapes[0][1:]])]
    initializers = []
    if len(shapes) == 2 and len(shapes[1]) == 2:  # a weight, as torch exports a Parameter
        initializers.append(numpy_helper.from_array(rng.standard_normal(shapes[1]).astype(np.float32), "proj.w"))
        names[1] = "proj.w"
    elif len(shapes) == 2:
        inputs.append(helper.make_tensor_value_info(names[1], TensorProto.FLOAT, list(shapes[1])))
    node = helper.make_node("Einsum", names, ["y"], equation=equation, name="/attn/Einsum")
    feeds = {v.name: rng.standard_normal(shape).astype(np.float32) for v, shape in zip(inputs, shapes)}
    check(make_model([node], inputs, ["y"], initializers, 13), tmp_path, feeds)
