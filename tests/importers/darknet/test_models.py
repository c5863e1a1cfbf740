"""The tiny YOLO family (YOLOv2-tiny, YOLOv3-tiny, YOLOv4-tiny), written here from their published structure with
fewer filters, at 96 x 96 with random weights, imported by pegasus and compared with OpenCV's dnn module: each
head's raw input tensor (the graph outputs) within rtol = atol = 1e-4; and the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pegasus.importers.darknet.loader import import_darknet
from tests.conftest import run_cli
from tests.importers.darknet.harness import check_against_opencv, darknet_model

NET = "[net]\nbatch=64\nsubdivisions=2\nwidth=96\nheight=96\nchannels=3\nmomentum=0.9\ndecay=0.0005\n" \
      "angle=0\nsaturation=1.5\nexposure=1.5\nhue=.1\nlearning_rate=0.001\nburn_in=1000\nmax_batches=500200\n" \
      "policy=steps\nsteps=400000,450000\nscales=.1,.1\n"
CLASSES = 2


def conv(filters: int, size: int = 3, stride: int = 1, activation: str = "leaky", bn: bool = True) -> str:
    return (f"[convolutional]\n{'batch_normalize=1' if bn else ''}\nfilters={filters}\nsize={size}\nstride={stride}\n"
            f"pad=1\nactivation={activation}\n")


def maxpool(size: int = 2, stride: int = 2) -> str:
    return f"[maxpool]\nsize={size}\nstride={stride}\n"


def yolo(mask: str) -> str:
    return (f"[yolo]\nmask = {mask}\nanchors = 10,14,  23,27,  37,58,  81,82,  135,169,  344,319\nclasses={CLASSES}\n"
            "num=6\njitter=.3\nignore_thresh = .7\ntruth_thresh = 1\nrandom=1\n")


def yolov2_tiny() -> str:
    layers = []
    for filters in (4, 8, 16, 32, 64):
        layers += [conv(filters), maxpool()]
    layers += [conv(128), maxpool(2, 1), conv(256), conv(128),
               conv(5 * (CLASSES + 5), 1, activation="linear", bn=False),
               "[region]\nanchors = 0.57273, 0.677385, 1.87446, 2.06253, 3.33843, 5.47434, 7.88282, 3.52778, "
               f"9.77052, 9.16828\nbias_match=1\nclasses={CLASSES}\ncoords=4\nnum=5\nsoftmax=1\njitter=.2\nrescore=0\n"
               "object_scale=5\nnoobject_scale=1\nclass_scale=1\ncoord_scale=1\nabsolute=1\nthresh = .6\nrandom=1\n"]
    return "\n".join([NET, *layers])


def yolov3_tiny() -> str:
    head = 3 * (CLASSES + 5)
    layers = []
    for filters in (4, 8, 16, 32, 64):
        layers += [conv(filters), maxpool()]
    layers += [conv(128), maxpool(2, 1), conv(256),                                     # 10, 11, 12
               conv(64, 1), conv(128), conv(head, 1, activation="linear", bn=False),   # 13, 14, 15
               yolo("3,4,5"),                                                            # 16
               "[route]\nlayers = -4\n", conv(32, 1), "[upsample]\nstride=2\n",         # 17, 18, 19
               "[route]\nlayers = -1, 8\n", conv(64), conv(head, 1, activation="linear", bn=False),  # 20, 21, 22
               yolo("0,1,2")]                                                            # 23
    return "\n".join([NET, *layers])


def yolov4_tiny() -> str:
    head = 3 * (CLASSES + 5)

    def csp(filters: int) -> list[str]:
        return [conv(filters), "[route]\nlayers=-1\ngroups=2\ngroup_id=1\n", conv(filters // 2), conv(filters // 2),
                "[route]\nlayers = -1,-2\n", conv(filters, 1), "[route]\nlayers = -6,-1\n", maxpool()]

    layers = [conv(8, stride=2), conv(16, stride=2)]                                     # 0, 1
    layers += csp(16) + csp(32) + csp(64)                                                 # 2-9, 10-17, 18-25
    layers += [conv(128),                                                                 # 26
               conv(64, 1), conv(128), conv(head, 1, activation="linear", bn=False),    # 27, 28, 29
               yolo("3,4,5").replace("classes", "scale_x_y = 1.05\nclasses"),             # 30
               "[route]\nlayers = -4\n", conv(32, 1), "[upsample]\nstride=2\n",          # 31, 32, 33
               "[route]\nlayers = -1, 23\n", conv(64), conv(head, 1, activation="linear", bn=False),  # 34, 35, 36
               yolo("1,2,3")]                                                             # 37
    return "\n".join([NET, *layers])


MODELS = {"yolov2_tiny": (yolov2_tiny, [(1, 35, 3, 3)]),
          "yolov3_tiny": (yolov3_tiny, [(1, 21, 3, 3), (1, 21, 6, 6)]),
          "yolov4_tiny": (yolov4_tiny, [(1, 21, 3, 3), (1, 21, 6, 6)])}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_tiny_yolo_matches_opencv(tmp_path, name):
    build, shapes = MODELS[name]
    cfg_path, weights = darknet_model(tmp_path, build(), name=name)
    notes: list[str] = []
    worst = check_against_opencv(cfg_path, weights, notes=notes)
    graph = import_darknet(cfg_path, weights)
    assert [graph.type_of(out).shape for out in graph.outputs] == shapes
    assert notes == [] and worst < 1e-4
    assert "BatchNormalization" not in {node.op for node in graph.nodes}   # folded into the convolutions


def test_command_line(tmp_path):
    cfg_path, weights = darknet_model(tmp_path, yolov3_tiny(), name="yolov3-tiny")
    out = tmp_path / "out"
    result = run_cli("import", "darknet", "--model", cfg_path, "--weights", weights, "--output-model",
                     out / "yolo.json", "--output-data", out / "yolo.data")
    assert result.code == 0 and result.stderr == "", result.stderr
    model = json.loads((out / "yolo.json").read_text())
    assert [o["name"] for o in model["outputs"]] == ["conv_15", "conv_22"]
    assert [i["shape"] for i in model["inputs"]] == [[1, 3, 96, 96]]


def test_leftover_weights_are_noted(tmp_path):
    cfg_path, weights = darknet_model(tmp_path, yolov2_tiny(), extra=10)
    notes: list[str] = []
    graph = import_darknet(cfg_path, weights, note=notes.append)
    assert len(notes) == 1 and "holds 10 floats more than m.cfg reads" in notes[0]
    assert np.isfinite(graph.value_of(graph.nodes[0].inputs[1])).all()
