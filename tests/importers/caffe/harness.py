"""The Caffe tests' harness: prototxt text written by the tests, caffemodels serialised with pegasus's own
Caffe message classes, and pegasus checked against OpenCV's dnn module (the independent reference, its own
Caffe reader and kernels) on random inputs.

``caffe_model(tmp_path, text, blobs)`` writes ``m.prototxt`` and ``m.caffemodel``: the caffemodel is the
parsed prototxt with each named layer's blobs added (as Caffe saves a trained net), in the current
``layer`` or legacy V1 ``layers`` form alike. ``check_against_opencv`` imports both, runs pegasus's float
reference and OpenCV (DNN_BACKEND_OPENCV, DNN_TARGET_CPU) on the same inputs and compares every graph
output with OpenCV's output of the layer that last wrote that blob.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from google.protobuf import text_format

from pegasus.importers.caffe.loader import import_caffe
from pegasus.importers.caffe.proto import message_classes
from pegasus.runtime.interpreter import run

RTOL = ATOL = 1e-4


def blob_message(array: np.ndarray, legacy: bool = False):
    blob = message_classes()["BlobProto"]()
    array = np.asarray(array, np.float32)
    if legacy:
        blob.num, blob.channels, blob.height, blob.width = (1,) * (4 - array.ndim) + array.shape
    else:
        blob.shape.dim.extend(array.shape)
    blob.data.extend(array.reshape(-1).tolist())
    return blob


def caffe_model(folder: Path, text: str, blobs: Mapping[str, Sequence[np.ndarray]] | None = None,
                name: str = "m", legacy: bool = False) -> tuple[Path, Path]:
    """Write NAME.prototxt and NAME.caffemodel (the net with ``blobs`` per layer name)."""
    prototxt, caffemodel = folder / f"{name}.prototxt", folder / f"{name}.caffemodel"
    prototxt.write_text(text)
    net = message_classes()["NetParameter"]()
    text_format.Parse(text, net)
    for layer in list(net.layer) + list(net.layers):
        for array in (blobs or {}).get(layer.name, []):
            layer.blobs.append(blob_message(array, legacy))
    caffemodel.write_bytes(net.SerializeToString())
    return prototxt, caffemodel


def last_writers(text: str) -> dict[str, tuple[str, int]]:
    """Blob name -> (the last layer writing it, which of its tops): OpenCV names outputs after layers."""
    net = message_classes()["NetParameter"]()
    text_format.Parse(text, net)
    writers = {}
    for layer in list(net.layer) + list(net.layers):
        for index, top in enumerate(layer.top):
            writers[top] = (layer.name, index)
    return writers


def opencv_outputs(net, writers: Mapping[str, tuple[str, int]], names: Sequence[str]) -> list[np.ndarray]:
    """OpenCV's value of each blob in ``names`` (the output of the layer that last wrote it)."""
    pins = [writers.get(name, (name, 0)) for name in names]
    layers = list(dict.fromkeys(layer for layer, _ in pins))
    outputs = dict(zip(layers, net.forwardAndRetrieve(layers)))
    return [outputs[layer][index] for layer, index in pins]


def opencv_net(prototxt: Path, caffemodel: Path | None):
    import cv2

    net = cv2.dnn.readNetFromCaffe(str(prototxt), str(caffemodel)) if caffemodel else \
        cv2.dnn.readNetFromCaffe(str(prototxt))
    net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
    net.setPreferableTarget(cv2.dnn.DNN_TARGET_CPU)
    return net


def check_against_opencv(prototxt: Path, caffemodel: Path | None, *, runs: int = 2, seed: int = 0,
                         low: float = -2.0, high: float = 2.0, notes: list[str] | None = None,
                         outputs: Sequence[str] | None = None, rtol: float = RTOL, atol: float = ATOL,
                         graph=None, **options) -> float:
    """Import with pegasus (or take ``graph``), run both on ``runs`` random inputs, compare every graph output
    (or ``outputs``) with OpenCV's; returns the largest absolute error."""
    if graph is None:
        graph = import_caffe(prototxt, caffemodel, note=notes.append if notes is not None else None, **options)
    writers = last_writers(prototxt.read_text())
    net = opencv_net(prototxt, caffemodel)
    rng = np.random.default_rng(seed)
    names = list(outputs or graph.outputs)
    worst = 0.0
    for _ in range(runs):
        feeds = {name: rng.uniform(low, high, graph.type_of(name).shape).astype(np.float32) for name in graph.inputs}
        for name, value in feeds.items():
            net.setInput(value, name)
        expected = opencv_outputs(net, writers, names)
        got = run(graph, feeds)
        for name, want in zip(names, expected):
            have = got[name]
            assert have.shape == want.shape, (name, have.shape, want.shape)
            np.testing.assert_allclose(have, want, rtol=rtol, atol=atol, err_msg=name)
            worst = max(worst, float(np.max(np.abs(have.astype(np.float64) - want), initial=0.0)))
    return worst


def run_pegasus(folder: Path, text: str, blobs: Mapping[str, Sequence[np.ndarray]] | None,
                feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Write the model, import it and run pegasus's float reference on ``feeds``: every graph output."""
    prototxt, caffemodel = caffe_model(folder, text, blobs)
    graph = import_caffe(prototxt, caffemodel)
    return run(graph, {name: np.asarray(value, np.float32) for name, value in feeds.items()})
