"""The Darknet tests' harness: cfg text written by the tests, weights files of the exact length the cfg needs
(counted here, independently of the importer, with positive variances for batch norm), and pegasus checked
against OpenCV's dnn module (its own Darknet reader and kernels) on random inputs.

``darknet_model(folder, cfg)`` writes ``m.cfg`` and ``m.weights``; ``check_against_opencv`` imports them, runs
pegasus's float reference and OpenCV (DNN_BACKEND_OPENCV, DNN_TARGET_CPU) on the same input and compares
each graph output: a [yolo]/[region] head's raw input with OpenCV's output of the layer feeding the head
(OpenCV itself decodes the head), else OpenCV's last layer's output.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from pegasus.importers.darknet.loader import import_darknet
from pegasus.runtime.interpreter import run

RTOL = ATOL = 1e-4


def sections(cfg: str) -> list[tuple[str, dict[str, str]]]:
    found = []
    for line in cfg.splitlines():
        line = "".join(line.split())
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            found.append((line[1:-1], {}))
        else:
            key, _, value = line.partition("=")
            found[-1][1].setdefault(key, value)
    return found


def weight_segments(cfg: str) -> list[tuple[str, int, int]]:
    """(kind, count, fan_in) of every block of floats the cfg's layers read, in file order."""
    net, *layers = sections(cfg)
    shapes: list[tuple[int, int, int] | None] = []
    c, h, w = int(net[1]["channels"]), int(net[1]["height"]), int(net[1]["width"])
    segments = []
    for index, (kind, o) in enumerate(layers):
        def get(key: str, default: int, o: dict = o) -> int:
            return int(o.get(key, default))
        if kind in ("convolutional", "conv"):
            filters, size, stride, groups = get("filters", 1), get("size", 1), get("stride", 1), get("groups", 1)
            pad = size // 2 if get("pad", 0) else get("padding", 0)
            segments.append(("bias", filters, 1))
            if get("batch_normalize", 0):
                segments += [("scale", filters, 1), ("mean", filters, 1), ("var", filters, 1)]
            segments.append(("weight", filters * c // groups * size * size, c // groups * size * size))
            c, h, w = filters, (h + 2 * pad - size) // stride + 1, (w + 2 * pad - size) // stride + 1
        elif kind in ("connected", "conn"):
            outputs = get("output", 1)
            segments += [("bias", outputs, 1), ("weight", outputs * c * h * w, c * h * w)]
            if get("batch_normalize", 0):
                segments += [("scale", outputs, 1), ("mean", outputs, 1), ("var", outputs, 1)]
            c, h, w = outputs, 1, 1
        elif kind in ("maxpool", "max"):
            stride = get("stride", 1)
            size = get("size", stride)
            padding = get("padding", size - 1)
            h, w = (h + padding - size) // stride + 1, (w + padding - size) // stride + 1
        elif kind in ("avgpool", "avg"):
            h = w = 1
        elif kind == "upsample":
            h, w = h * get("stride", 2), w * get("stride", 2)
        elif kind == "route":
            refs = [int(v) for v in o["layers"].split(",") if v]
            picked = [shapes[index + r if r < 0 else r] for r in refs]
            c, h, w = sum(p[0] // get("groups", 1) for p in picked), picked[0][1], picked[0][2]
        shapes.append((c, h, w))
    return segments


def weights_bytes(cfg: str, seed: int = 0, header: tuple[int, int, int] = (0, 2, 5), seen: int = 32013312,
                  drop: int = 0, extra: int = 0) -> bytes:
    """A weights file for ``cfg``: header (seen as int64 from version 0.2), then random values per block."""
    rng = np.random.default_rng(seed)
    major, minor, revision = header
    wide = major * 10 + minor >= 2 and major < 1000 and minor < 1000
    data = struct.pack("<iii", major, minor, revision) + struct.pack("<q" if wide else "<i", seen)
    blocks = []
    for kind, count, fan_in in weight_segments(cfg):
        if kind in ("scale", "var"):
            blocks.append(rng.uniform(0.5, 1.5, count))
        elif kind == "weight":
            blocks.append(rng.normal(0, 1.5 / np.sqrt(fan_in), count))
        else:
            blocks.append(rng.normal(0, 0.3, count))
    values = np.concatenate(blocks + [rng.normal(size=extra)]).astype("<f4")
    return data + values[:values.size - drop].tobytes()


def darknet_model(folder: Path, cfg: str, name: str = "m", **weights) -> tuple[Path, Path]:
    cfg_path, weights_path = folder / f"{name}.cfg", folder / f"{name}.weights"
    cfg_path.write_text(cfg)
    weights_path.write_bytes(weights_bytes(cfg, **weights))
    return cfg_path, weights_path


def opencv_outputs(cfg: Path, weights: Path, x: np.ndarray, heads: int) -> list[np.ndarray]:
    import cv2

    net = cv2.dnn.readNetFromDarknet(str(cfg), str(weights))
    net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
    net.setPreferableTarget(cv2.dnn.DNN_TARGET_CPU)
    net.setInput(x)
    names = list(net.getLayerNames())
    if heads:   # OpenCV puts a permute between a head's input and the head (a [region] is its detection_out)
        wanted = [names[index - 2] for index, n in enumerate(names) if n.startswith("yolo_") or n == "detection_out"]
    else:   # the last layer (OpenCV's unconnected outputs also list the unused halves of its route slices)
        wanted = names[-1:]
    return list(net.forward(wanted))


def check_against_opencv(cfg: Path, weights: Path, *, runs: int = 2, seed: int = 0, notes: list[str] | None = None,
                         rtol: float = RTOL, atol: float = ATOL) -> float:
    """Import with pegasus, run both on ``runs`` random images in [0, 1), compare every output; returns the
    largest absolute error."""
    graph = import_darknet(cfg, weights, note=notes.append if notes is not None else None)
    heads = sum(1 for kind, _ in sections(cfg.read_text()) if kind in ("yolo", "region"))
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(runs):
        x = rng.uniform(0, 1, graph.type_of(graph.inputs[0]).shape).astype(np.float32)
        expected = opencv_outputs(cfg, weights, x, heads)
        got = run(graph, {graph.inputs[0]: x})
        assert len(expected) == len(graph.outputs)
        for name, want in zip(graph.outputs, expected):
            have = got[name]
            want = want.reshape(have.shape) if want.size == have.size else want
            assert have.shape == want.shape, (name, have.shape, want.shape)
            np.testing.assert_allclose(have, want, rtol=rtol, atol=atol, err_msg=name)
            worst = max(worst, float(np.max(np.abs(have.astype(np.float64) - want))))
    return worst
