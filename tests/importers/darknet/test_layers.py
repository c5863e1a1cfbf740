"""Every supported Darknet section in small cfgs written here, with weights files of random values, imported by
pegasus and compared with OpenCV's dnn module on random images (rtol = atol = 1e-4). Activations OpenCV's
Darknet reader lacks (relu6, hardswish, elu) are checked as OpenCV's linear convolution followed by the
activation's formula in NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.importers.darknet.loader import import_darknet
from pegasus.runtime.interpreter import run
from tests.importers.caffe.harness import caffe_model, opencv_net
from tests.importers.darknet.harness import check_against_opencv, darknet_model, opencv_outputs


def cfg(*blocks: str, width: int = 16, height: int = 16, channels: int = 3) -> str:
    net = f"[net]\n# training options are ignored\nbatch=64\nsubdivisions=8\nwidth={width}\nheight={height}\n" \
          f"channels={channels}\nmomentum=0.9\nlearning_rate=0.001\n"
    return "\n".join([net, *blocks])


def conv(filters: int, size: int = 3, stride: int = 1, pad: int = 1, activation: str = "leaky", bn: int = 1,
         extra: str = "") -> str:
    return (f"[convolutional]\nbatch_normalize={bn}\nfilters={filters}\nsize={size}\nstride={stride}\npad={pad}\n"
            f"activation={activation}\n{extra}\n")


ACTIVATIONS = ["leaky", "linear", "relu", "logistic", "mish", "swish", "tanh"]


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_convolution_activation(tmp_path, activation):
    check_against_opencv(*darknet_model(tmp_path, cfg(conv(6, activation=activation))))


@pytest.mark.parametrize("block", [
    conv(5, size=3, stride=2, bn=0),
    conv(5, size=1, stride=1, pad=0),
    conv(4, size=3, stride=1, pad=0, extra="padding=2"),
    conv(5, size=5, stride=2, extra="  # a comment after the options\n"),
    conv(6, size=3, stride=1, extra="groups=3"),
    conv(3, size=3, stride=1, extra="groups=3"),
], ids=["stride2_no_bn", "1x1", "explicit_padding", "5x5_stride2", "groups", "depthwise"])
def test_convolution_geometry(tmp_path, block):
    check_against_opencv(*darknet_model(tmp_path, cfg(block, width=15, height=13)))


FORMULAS = {
    "relu6": lambda x: np.clip(x, 0, 6),
    "hardswish": lambda x: x * np.clip(x + 3, 0, 6) / 6,
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
}


@pytest.mark.parametrize("activation", sorted(FORMULAS))
def test_activation_opencv_lacks(tmp_path, activation):
    """The convolution from OpenCV (activation linear), the activation from its formula."""
    linear, weights = darknet_model(tmp_path, cfg(conv(6, activation="linear")), name="linear")
    model = tmp_path / "act.cfg"
    model.write_text(linear.read_text().replace("activation=linear", f"activation={activation}"))
    graph = import_darknet(model, weights)
    x = np.random.default_rng(1).uniform(-8, 8, (1, 3, 16, 16)).astype(np.float32)  # reaching relu6's 6, elu's tail
    before = opencv_outputs(linear, weights, x, 0)[0]
    assert before.min() < -3 and before.max() > 6
    np.testing.assert_allclose(run(graph, {"data": x})[graph.outputs[0]], FORMULAS[activation](before), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("size, stride, extra, width", [
    (2, 2, "", 16), (2, 2, "", 15), (2, 1, "", 13), (3, 1, "", 13), (3, 2, "", 13), (5, 1, "", 9),
    (3, 2, "padding=0", 13), (2, 1, "padding=0", 8),
])
def test_maxpool(tmp_path, size, stride, extra, width):
    block = f"[maxpool]\nsize={size}\nstride={stride}\n{extra}\n"
    check_against_opencv(*darknet_model(tmp_path, cfg(conv(4), block, width=width, height=width)))


def test_classifier_avgpool_connected_softmax(tmp_path):
    model = cfg(conv(8), "[maxpool]\nsize=2\nstride=2\n", conv(8), "[avgpool]\n", "[dropout]\nprobability=0.5\n",
                "[connected]\noutput=5\nactivation=leaky\n", "[softmax]\ngroups=1\n", "[cost]\ntype=sse\n")
    check_against_opencv(*darknet_model(tmp_path, model))


def test_connected_on_maps(tmp_path):
    model = cfg(conv(4, stride=2), "[connected]\noutput=7\nactivation=linear\n",
                "[connected]\noutput=3\nactivation=logistic\n", width=8, height=8)
    check_against_opencv(*darknet_model(tmp_path, model))


@pytest.mark.parametrize("stride", [2, 3])
def test_upsample(tmp_path, stride):
    check_against_opencv(*darknet_model(tmp_path, cfg(conv(4, stride=2), f"[upsample]\nstride={stride}\n")))


@pytest.mark.parametrize("extra, caffe", [("dilation=2", "pad: 2 dilation: 2 stride: 1"),
                                          ("stride_x=2\nstride_y=1", "pad: 1 stride_h: 1 stride_w: 2")],
                         ids=["dilation", "stride_xy"])
def test_convolution_options_opencv_ignores(tmp_path, extra, caffe):
    """OpenCV's Darknet reader ignores dilation and stride_x/stride_y: the same convolution (weights taken from
    the file: biases, then the kernel) runs in OpenCV's Caffe reader instead."""
    cfg_path, weights = darknet_model(tmp_path, cfg(conv(4, bn=0, activation="linear", extra=extra), width=11,
                                                    height=9))
    values = np.frombuffer(weights.read_bytes()[20:], "<f4")
    prototxt, caffemodel = caffe_model(tmp_path, 'input: "data"\ninput_shape { dim: 1 dim: 3 dim: 9 dim: 11 }\n'
                                       'layer { name: "c" type: "Convolution" bottom: "data" top: "c" '
                                       f'convolution_param {{ num_output: 4 kernel_size: 3 {caffe} }} }}',
                                       {"c": [values[4:].reshape(4, 3, 3, 3), values[:4]]})
    x = np.random.default_rng(5).uniform(0, 1, (1, 3, 9, 11)).astype(np.float32)
    net = opencv_net(prototxt, caffemodel)
    net.setInput(x)
    graph = import_darknet(cfg_path, weights)
    np.testing.assert_allclose(run(graph, {"data": x})["conv_0"], net.forward(), rtol=1e-4, atol=1e-4)


def _opencv_last(tmp_path, text: str, x: np.ndarray, name: str) -> np.ndarray:
    cfg_path, weights = darknet_model(tmp_path, text, name=name)
    return opencv_outputs(cfg_path, weights, x, 0)[0]


def test_upsample_scale_and_softmax_temperature(tmp_path):
    """OpenCV ignores upsample's scale and softmax's temperature: the layers without them, then the formulas."""
    x = np.random.default_rng(6).uniform(0, 1, (1, 3, 16, 16)).astype(np.float32)
    plain = cfg(conv(4, stride=2), "[upsample]\nstride=2\n")
    cfg_path, weights = darknet_model(tmp_path, plain + "scale=0.5\n", name="scaled")   # the last section's option
    np.testing.assert_allclose(run(import_darknet(cfg_path, weights), {"data": x})["upsample_1"],
                               0.5 * _opencv_last(tmp_path, plain, x, "plain"), rtol=1e-4, atol=1e-5)
    pooled = cfg(conv(4, stride=2), "[avgpool]\n")
    cfg_path, weights = darknet_model(tmp_path, pooled + "[softmax]\ntemperature=2\n", name="tempered")
    logits = _opencv_last(tmp_path, pooled, x, "pooled").reshape(1, 4) / 2
    expected = np.exp(logits) / np.exp(logits).sum()
    np.testing.assert_allclose(run(import_darknet(cfg_path, weights), {"data": x})["softmax_2"].reshape(1, 4),
                               expected, rtol=1e-4, atol=1e-6)


def test_shortcut_from_several_layers(tmp_path):
    """The previous layer plus every layer in ``from`` (OpenCV adds only the first): the sum of OpenCV's outputs."""
    linear = conv(4, bn=0, activation="linear")
    cfg_path, weights = darknet_model(tmp_path, cfg(linear, linear, linear, "[shortcut]\nfrom=-2,-3\n"))
    x = np.random.default_rng(7).uniform(0, 1, (1, 3, 16, 16)).astype(np.float32)
    import cv2

    net = cv2.dnn.readNetFromDarknet(str(cfg_path), str(weights))
    net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
    net.setInput(x)
    convs = net.forward(["conv_0", "conv_1", "conv_2"])
    np.testing.assert_allclose(run(import_darknet(cfg_path, weights), {"data": x})["shortcut_3"], sum(convs),
                               rtol=1e-4, atol=1e-4)


def test_route_and_shortcut(tmp_path):
    model = cfg(conv(4), conv(8, stride=2), conv(4, size=1), "[route]\nlayers=-3\n", "[maxpool]\nsize=2\nstride=2\n",
                "[route]\nlayers = -1, -3\n", conv(8, size=1), "[shortcut]\nfrom=-6\nactivation=leaky\n")
    check_against_opencv(*darknet_model(tmp_path, model))


def test_route_groups(tmp_path):
    """One input split in groups (YOLOv4-tiny's CSP blocks) against OpenCV; several inputs (group ``group_id`` of
    each, as Darknet copies them, where OpenCV departs) against the inputs' slices."""
    model = cfg(conv(8), "[route]\nlayers=-1\ngroups=2\ngroup_id=1\n", conv(4))
    check_against_opencv(*darknet_model(tmp_path, model))
    cfg_path, weights = darknet_model(tmp_path, model + "[route]\nlayers=0,-1\ngroups=4\ngroup_id=2\n", name="multi")
    graph = import_darknet(cfg_path, weights, optimize=False)
    graph.outputs = ["route_3", "conv_0", "conv_2"]
    got = run(graph, {"data": np.random.default_rng(4).uniform(0, 1, (1, 3, 16, 16)).astype(np.float32)})
    assert graph.type_of("route_3").shape == (1, 3, 16, 16)
    np.testing.assert_array_equal(got["route_3"], np.concatenate([got["conv_0"][:, 4:6], got["conv_2"][:, 2:3]], 1))


def test_softmax_over_a_map(tmp_path):
    """Darknet's softmax normalises all C*H*W values of an image together."""
    cfg_path, weights = darknet_model(tmp_path, cfg(conv(3, activation="linear"), "[softmax]\n", width=4, height=4))
    graph = import_darknet(cfg_path, weights)
    x = np.random.default_rng(2).uniform(0, 1, (1, 3, 4, 4)).astype(np.float32)
    before = opencv_outputs(_without_softmax(cfg_path), weights, x, 0)[0].reshape(1, -1)
    expected = np.exp(before - before.max()) / np.exp(before - before.max()).sum()
    np.testing.assert_allclose(run(graph, {"data": x})[graph.outputs[0]].reshape(1, -1), expected, rtol=1e-5,
                               atol=1e-6)


def _without_softmax(cfg_path):
    path = cfg_path.with_name("no_softmax.cfg")
    path.write_text(cfg_path.read_text().replace("[softmax]", ""))
    return path


@pytest.mark.parametrize("header", [(0, 1, 0), (0, 2, 0), (0, 2, 5), (1, 0, 0)])
def test_weights_header_versions(tmp_path, header):
    """``seen`` is an int32 before version 0.2 and an int64 from it: both read as OpenCV reads them."""
    model = cfg(conv(4), "[connected]\noutput=3\nactivation=linear\n", width=6, height=6)
    check_against_opencv(*darknet_model(tmp_path, model, header=header))


def test_transposed_connected_weights(tmp_path):
    """A major version above 1000 marks files storing connected weights as (inputs, outputs)."""
    model = cfg("[connected]\noutput=3\nactivation=linear\n", width=2, height=2, channels=2)
    cfg_path, weights = darknet_model(tmp_path, model)
    data = bytearray(weights.read_bytes())
    values = np.frombuffer(bytes(data[20:]), "<f4")
    bias, matrix = values[:3], values[3:].reshape(3, 8)
    old = tmp_path / "old.weights"
    old.write_bytes(np.array([1001, 0, 0], "<i4").tobytes() + np.array([0], "<i4").tobytes() + bias.tobytes()
                    + np.ascontiguousarray(matrix.T).tobytes())
    x = np.random.default_rng(3).uniform(0, 1, (1, 2, 2, 2)).astype(np.float32)
    new_graph, old_graph = import_darknet(cfg_path, weights), import_darknet(cfg_path, old)
    expected = x.reshape(1, 8) @ matrix.T + bias
    for graph in (new_graph, old_graph):
        np.testing.assert_allclose(run(graph, {"data": x})[graph.outputs[0]], expected, rtol=1e-5, atol=1e-6)
