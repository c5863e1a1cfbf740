"""``pegasus import pytorch``'s flags: a .pt2 with symbolic dims (batch 1 by default with a note, other dims from
--input-size-list, static dims kept), --outputs cutting at a layer, --inputs naming the inputs in the order of
the size list, an adaptive pool whose windows differ in length."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pegasus.ir import serialize
from pegasus.runtime.interpreter import run
from tests.importers.pytorch.harness import cli_import

pytestmark = pytest.mark.xdist_group("pytorch")


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4, 2)

    def forward(self, x, bias):
        y = torch.relu(self.conv(x)) + bias
        return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1)), F.adaptive_max_pool2d(y, (2, 3))


def _load(out):
    return serialize.load(out.with_suffix(".json"), out.with_suffix(".data"))


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    return _Net().eval()


def test_symbolic_dims_of_a_pt2(net, tmp_path):
    batch, height = torch.export.Dim("batch", min=1, max=8), torch.export.Dim("height", min=2, max=64)
    program = torch.export.export(net, (torch.randn(2, 3, 8, 6), torch.randn(1, 4, 1, 1)),
                                  dynamic_shapes={"x": {0: batch, 2: height}, "bias": None})
    torch.export.save(program, tmp_path / "dyn.pt2")
    code, _, stderr = cli_import(tmp_path / "dyn.pt2", tmp_path / "a")
    assert code == 2 and "symbolic dimension at axis 2: give its shape with --input-size-list" in stderr
    code, _, stderr = cli_import(tmp_path / "dyn.pt2", tmp_path / "b", "--input-size-list", "3,4,5#4,1,1")
    assert code == 2 and "exported for ['?', 3, '?', 6]" in stderr
    code, _, stderr = cli_import(tmp_path / "dyn.pt2", tmp_path / "c", "--input-size-list", "3,10,6#4,1,1")
    assert code == 0, stderr
    assert "x: symbolic batch = 1" not in stderr   # the batch came with the size list (1 by default)
    graph = _load(tmp_path / "c")
    x, bias = torch.randn(1, 3, 10, 6), torch.randn(1, 4, 1, 1)
    got = run(graph, {"x": x.numpy(), "bias": bias.numpy()})
    for name, want in zip(graph.outputs, net(x, bias)):
        np.testing.assert_allclose(got[name], want.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_outputs_cut_and_inputs_order(net, tmp_path):
    torch.jit.save(torch.jit.trace(net, (torch.randn(1, 3, 6, 6), torch.randn(1, 4, 1, 1))), tmp_path / "m.pt")
    code, _, stderr = cli_import(tmp_path / "m.pt", tmp_path / "cut", "--input-size-list", "4,1,1#3,6,6",
                                 "--inputs", "bias x", "--outputs", "fc")
    assert code == 0, stderr
    graph = _load(tmp_path / "cut")
    assert graph.inputs == ["x", "bias"] and graph.outputs == ["fc"]
    assert [graph.type_of(n).shape for n in graph.inputs] == [(1, 3, 6, 6), (1, 4, 1, 1)]
    assert not any(node.op == "MaxPool" for node in graph.nodes)
    code, _, stderr = cli_import(tmp_path / "m.pt", tmp_path / "bad", "--input-size-list", "3,6,6#4,1,1",
                                 "--outputs", "nothing")
    assert code == 2 and "--outputs: 'nothing' is not a tensor" in stderr and "fc" in stderr
    code, _, stderr = cli_import(tmp_path / "m.pt", tmp_path / "bad", "--input-size-list", "3,6,6#4,1,1",
                                 "--inputs", "x y")
    assert code == 2 and "--inputs must name each of the model's inputs once: x bias ('y' is not one)" in stderr


def test_adaptive_pool_with_uneven_windows(net, tmp_path):
    """Traced at 6 x 6, imported at 5 x 6: the adaptive max pool to (2, 3) has windows [0, 3) and [2, 5) on the
    first axis (once refused: no registry op pools windows of unequal length)."""
    torch.jit.save(torch.jit.trace(net, (torch.randn(1, 3, 6, 6), torch.randn(1, 4, 1, 1))), tmp_path / "m.pt")
    code, _, stderr = cli_import(tmp_path / "m.pt", tmp_path / "m", "--input-size-list", "3,5,6#4,1,1")
    assert code == 0, stderr
    graph = _load(tmp_path / "m")
    x, bias = torch.randn(1, 3, 5, 6), torch.randn(1, 4, 1, 1)
    got = run(graph, {"x": x.numpy(), "bias": bias.numpy()})
    for name, want in zip(graph.outputs, net(x, bias)):
        np.testing.assert_allclose(got[name], want.detach().numpy(), rtol=1e-4, atol=1e-5)


class _ListOut(nn.Module):
    def forward(self, x):
        return [x + 1, x * 2], x - 3


def test_outputs_returned_in_lists(tmp_path):
    x = torch.randn(2, 3)
    torch.jit.save(torch.jit.script(_ListOut()), tmp_path / "m.pt")
    code, _, stderr = cli_import(tmp_path / "m.pt", tmp_path / "m", "--input-size-list", "2,3", "--size-with-batch",
                                 "True")
    assert code == 0, stderr
    graph = _load(tmp_path / "m")
    got = run(graph, {"x": x.numpy()})
    (a, b), c = _ListOut()(x)
    assert len(graph.outputs) == 3
    for name, want in zip(graph.outputs, (a, b, c)):
        np.testing.assert_allclose(got[name], want.numpy(), rtol=1e-6)


def test_pt2_whose_sample_inputs_carry_dynamo_marks(net, tmp_path):
    """torch._dynamo.mark_dynamic (or an export attempt that failed) leaves ``_dynamo_*_indices`` sets on the
    sample inputs, which torch.save pickles through torch._tensor._rebuild_from_type_v2: a plain tensor still."""
    x, bias = torch.randn(2, 3, 6, 6), torch.randn(1, 4, 1, 1)
    torch._dynamo.mark_dynamic(x, 0)
    torch.export.save(torch.export.export(net, (x, bias)), tmp_path / "marked.pt2")
    code, _, stderr = cli_import(tmp_path / "marked.pt2", tmp_path / "m")
    assert code == 0, stderr
    graph = _load(tmp_path / "m")
    got = run(graph, {"x": x[:1].numpy(), "bias": bias.numpy()})
    for name, want in zip(graph.outputs, net(x[:1], bias)):
        np.testing.assert_allclose(got[name], want.detach().numpy(), rtol=1e-4, atol=1e-5)
