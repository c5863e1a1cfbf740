"""Patterns of real models' code that the model zoo of models.py does not hold, each saved as the user would
(traced, scripted, exported) and compared with torch's own outputs: ``nn.Dropout(inplace=True)`` (torchvision's
EfficientNet and MobileNetV3 heads), a stochastic depth whose training branch draws random numbers
(``if not self.training: return x``, which a scripted model keeps until freezing), an FPN's bilinear
upsampling quantized (its bundle equal to the integer simulation), ``nn.MultiheadAttention`` and
``nn.TransformerEncoderLayer`` traced under ``torch.no_grad()`` (their fused fast-path kernels) and with
``need_weights`` (masked_fill, baddbmm), integer tensors added to float ones (type promotion), adaptive
average pools whose windows differ in length (a VGG head at another input size, a PSPNet pyramid), the
heads of embedding and segmentation models (F.normalize, argmax) and a hand-written LayerNorm (std, var),
indexing with constant integers or masks (a BGR/RGB swap, index_select, torch.tensor, mT), GLU, Threshold,
roll and PixelUnshuffle, attention written with einsum."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.importers.pytorch.harness import import_and_run, quantize_and_run_bundle

pytestmark = pytest.mark.xdist_group("pytorch")


def _save(model: nn.Module, inputs: tuple, fmt: str, path) -> None:
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if fmt == "traced":
            torch.jit.save(torch.jit.trace(model, inputs), str(path))
        elif fmt == "scripted":
            torch.jit.save(torch.jit.script(model), str(path))
        else:
            torch.export.save(torch.export.export(model, inputs), str(path))


def _check(model: nn.Module, inputs: tuple, fmt: str, tmp_path) -> None:
    torch.manual_seed(0)
    model.eval()
    path = tmp_path / ("m.pt2" if fmt == "exported" else "m.pt")
    _save(model, inputs, fmt, path)
    with torch.no_grad():
        expected = model(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    _, outputs = import_and_run(path, tmp_path / "m", [x.numpy() for x in inputs])
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)


class _StochasticDepth(nn.Module):
    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        keep = torch.rand(x.shape[0], 1, 1, 1) > self.p
        return x * keep / (1.0 - self.p)


class _MBConvHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(6, 6, 3, padding=1, groups=6)
        self.stochastic_depth = _StochasticDepth(0.2)
        self.classifier = nn.Sequential(nn.Dropout(0.2, inplace=True), nn.Linear(6, 5))

    def forward(self, x):
        x = self.stochastic_depth(F.silu(self.conv(x))) + x
        return self.classifier(x.mean([2, 3]))


@pytest.mark.parametrize("fmt", ["traced", "scripted", "exported"])
def test_training_branches_and_inplace_dropout(tmp_path, fmt):
    torch.manual_seed(3)
    _check(_MBConvHead(), (torch.randn(1, 6, 7, 5),), fmt, tmp_path)


class _FPN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Sequential(nn.Conv2d(3, 10, 3, 2, 1), nn.BatchNorm2d(10), nn.ReLU(inplace=True))
        self.c2 = nn.Sequential(nn.Conv2d(10, 18, 3, 2, 1), nn.BatchNorm2d(18), nn.ReLU(inplace=True))
        self.lat1, self.lat2 = nn.Conv2d(10, 16, 1), nn.Conv2d(18, 16, 1)
        self.head = nn.Conv2d(16, 5, 3, padding=1)

    def forward(self, x):
        c1 = self.c1(x)
        p2 = self.lat2(self.c2(c1))
        p1 = self.lat1(c1) + F.interpolate(p2, size=c1.shape[-2:], mode="bilinear", align_corners=False)
        return F.interpolate(self.head(p1), scale_factor=2.0, mode="bilinear", align_corners=True)


def test_quantized_bilinear_upsampling_bundle_equals_the_simulation(tmp_path):
    """A bilinear Resize ran in float between converters in a quantized graph, computed in float64 by the
    simulation and float32 by the bundle: the outputs differed (here in 1 of 4 values)."""
    torch.manual_seed(5)
    model, x = _FPN().eval(), torch.randn(1, 3, 21, 17)
    torch.jit.save(torch.jit.trace(model, (x,)), str(tmp_path / "fpn.pt"))
    with torch.no_grad():
        want = model(x).numpy()
    got, ran = quantize_and_run_bundle(tmp_path / "fpn.pt", tmp_path / "work", [x.numpy()])
    assert float(np.max(np.abs(got.reshape(want.shape) - want)) / np.max(np.abs(want))) < 0.05
    assert ran.tobytes() == got.astype(np.float32).ravel().tobytes()


class _Transformer(nn.Module):
    """Self-attention with every mask the fast path merges, the attention weights (the slow path), and an
    encoder layer, norm first with GELU or post-norm with ReLU."""

    def __init__(self, norm_first: bool, activation: str):
        super().__init__()
        self.attn = nn.MultiheadAttention(12, 4, batch_first=True)
        self.enc = nn.TransformerEncoderLayer(12, 2, 20, batch_first=True, norm_first=norm_first,
                                              activation=activation)
        self.register_buffer("padding", torch.tensor([[False] * 5 + [True] * 2, [False] * 6 + [True]]))
        self.register_buffer("causal", torch.triu(torch.ones(7, 7, dtype=torch.bool), 1))

    def forward(self, x):
        a = self.attn(x, x, x, key_padding_mask=self.padding, need_weights=False)[0]
        b = self.attn(x, x, x, attn_mask=self.causal, need_weights=False)[0]
        c = self.attn(x, x, x, attn_mask=self.causal, key_padding_mask=self.padding, need_weights=False)[0]
        d, weights = self.attn(x, x, x, key_padding_mask=self.padding)   # need_weights: not the fast path
        return self.enc(a + b + c + d, src_key_padding_mask=self.padding), self.enc(x), weights


@pytest.mark.parametrize("norm_first,activation", [(True, "gelu"), (False, "relu")])
def test_transformer_fast_path_traced_without_gradients(tmp_path, norm_first, activation):
    torch.manual_seed(2)
    model, x = _Transformer(norm_first, activation).eval(), torch.randn(2, 7, 12)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(model, (x,))
        expected = model(x)
    kinds = {node.kind() for node in traced.inlined_graph.nodes()}
    assert {"aten::_native_multi_head_attention", "aten::_transformer_encoder_layer_fwd"} <= kinds
    torch.jit.save(traced, str(tmp_path / "m.pt"))
    _, outputs = import_and_run(tmp_path / "m.pt", tmp_path / "m", [x.numpy()])
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)


class _TCN(nn.Module):
    """A temporal convolution stack whose first residual is ``+ 0`` (traced: a 0-d int64 tensor constant) and a
    position term from ``torch.arange`` (int64) added to float activations."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv1d(6 if d == 1 else 14, 14, 3, dilation=d, padding=d) for d in (1, 2)])
        self.fc = nn.Linear(14, 3)

    def forward(self, x):
        x = x.transpose(1, 2)
        for conv in self.convs:
            x = F.gelu(conv(x), approximate="tanh") + (x if x.shape[1] == 14 else 0)
        x = x + torch.arange(x.shape[-1]) * 0.01
        return self.fc(x.amax(-1))


def test_integer_tensors_promoted_to_float(tmp_path):
    """The Add read an int64 constant: its table had no entry for it and quantized inference stopped."""
    torch.manual_seed(4)
    model, x = _TCN().eval(), torch.randn(1, 25, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.trace(model, (x,)), str(tmp_path / "tcn.pt"))
    with torch.no_grad():
        want = model(x).numpy()
    _, (floats,) = import_and_run(tmp_path / "tcn.pt", tmp_path / "float", [x.numpy()])
    np.testing.assert_allclose(floats, want, rtol=1e-4, atol=1e-5)
    got, ran = quantize_and_run_bundle(tmp_path / "tcn.pt", tmp_path / "work", [x.numpy()])
    assert float(np.max(np.abs(got.reshape(want.shape) - want)) / np.max(np.abs(want))) < 0.05
    assert ran.tobytes() == got.astype(np.float32).ravel().tobytes()


@pytest.mark.parametrize("freeze", [False, True])
def test_transformer_scripted(tmp_path, freeze):
    """A scripted nn.MultiheadAttention decides on its fast path at run time (is_grad_enabled, is_nested,
    device types, the why_not_fast_path message's length) and reads in_proj_weight, which freezing keeps as an
    attribute; torch.jit.freeze before saving too."""
    torch.manual_seed(6)
    model, x = _Transformer(True, "gelu").eval(), torch.randn(2, 7, 12)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(model)
        torch.jit.save(torch.jit.freeze(scripted) if freeze else scripted, str(tmp_path / "m.pt"))
        expected = model(x)
    _, outputs = import_and_run(tmp_path / "m.pt", tmp_path / "m", [x.numpy()])
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)


class _Pyramid(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.bins = nn.ModuleList([nn.AdaptiveAvgPool2d(b) for b in (1, 2, 3, 6)])
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d((3, 3)), nn.Flatten(), nn.Linear(54, 4))

    def forward(self, x):
        y = torch.relu(self.conv(x))
        size = y.shape[-2:]
        pyramid = [F.interpolate(b(y), size=size, mode="bilinear", align_corners=False) for b in self.bins]
        return self.head(torch.cat([y] + pyramid, 1)[:, :6]), F.adaptive_avg_pool1d(y.flatten(2), 5)


@pytest.mark.parametrize("fmt", ["traced", "exported"])
def test_adaptive_pools_with_uneven_windows(tmp_path, fmt):
    torch.manual_seed(7)
    _check(_Pyramid(), (torch.randn(1, 3, 7, 11),), fmt, tmp_path)


class _Heads(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 5, 3, padding=1)
        self.embed = nn.Linear(5 * 6 * 7, 16)

    def forward(self, x):
        y = self.conv(x)
        z = self.embed(y.flatten(1))
        norm = (z - z.mean(-1, keepdim=True)) / (z.std(-1, keepdim=True) + 1e-6)   # the Annotated Transformer's
        return (F.normalize(z, dim=1), y.argmax(1), y.argmin(), norm, torch.var(y, (2, 3), correction=0),
                torch.norm(y, p=1, dim=1), torch.linalg.vector_norm(y, ord=float("inf"), dim=(2, 3), keepdim=True))


@pytest.mark.parametrize("fmt", ["traced", "exported"])
def test_embedding_and_segmentation_heads(tmp_path, fmt):
    torch.manual_seed(8)
    _check(_Heads(), (torch.randn(2, 3, 6, 7),), fmt, tmp_path)


class _Index(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("keep", torch.tensor([True, False, True, True, False, True, True, False, True]))

    def forward(self, x):
        bgr = x[:, [2, 1, 0]]
        return (bgr, torch.index_select(x, 1, torch.tensor([0, 2])), x[:, :, :, self.keep], x[:, None, 0] * 2,
                bgr.mT, x[:, :, 1:-1:2, ::3])


@pytest.mark.parametrize("fmt", ["traced", "scripted", "exported"])
def test_indexing_with_constants(tmp_path, fmt):
    _check(_Index(), (torch.randn(1, 3, 7, 9),), fmt, tmp_path)


class _Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.unshuffle, self.glu, self.threshold = nn.PixelUnshuffle(2), nn.GLU(1), nn.Threshold(0.1, 20.0)
        self.conv = nn.Conv2d(16, 6, 1)

    def forward(self, x):
        y = self.glu(self.conv(self.unshuffle(x)))
        return self.threshold(y), torch.roll(y, (-2, 1), (1, 3)), torch.roll(x, 3, -1)


@pytest.mark.parametrize("fmt", ["traced", "scripted", "exported"])
def test_gated_and_rolled(tmp_path, fmt):
    torch.manual_seed(9)
    _check(_Gated(), (torch.randn(1, 4, 6, 10),), fmt, tmp_path)


class _EinsumAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.mix = nn.Parameter(torch.randn(5, 7))

    def forward(self, x):
        q, k, v = self.qkv(x).reshape(2, 7, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
        attention = torch.einsum("bhqd,bhkd->bhqk", q, k).softmax(-1)
        return (torch.einsum("bhqk,bhkd->bqhd", attention, v), torch.einsum("ij,bjc->bic", self.mix, x),
                torch.einsum("bnc->bcn", x), torch.einsum("bnc->b", x), torch.einsum("bn,bm->bnm", x[:, 0], x[:, 1]))


@pytest.mark.parametrize("fmt", ["traced", "exported"])
def test_einsum(tmp_path, fmt):
    torch.manual_seed(10)
    _check(_EinsumAttention(), (torch.randn(2, 7, 8),), fmt, tmp_path)
