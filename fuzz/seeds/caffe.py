"""Small Caffe models for the corpus (fuzz/corpus/caffe/<name>/: m.prototxt + m.caffemodel), the caffemodel
serialised with pegasus's own Caffe message declarations (importers/caffe/proto.py) as Caffe saves a trained
net (the parsed prototxt with each layer's blobs): an SSD-style block (Convolution, in-place BatchNorm, Scale
and ReLU, depthwise convolution, Eltwise, Permute, Flatten, Concat, PriorBox, DetectionOutput), a classifier
(InnerProduct, Pooling, LRN, Dropout, Softmax) and a legacy V1 ``layers`` net with 4-d ``num/channels/height/
width`` blobs."""

from __future__ import annotations

import numpy as np
from google.protobuf import text_format

from fuzz.targets import CORPUS

SSD = """name: "ssd_block"
input: "data"
input_shape { dim: 1 dim: 3 dim: 12 dim: 12 }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 4 bias_term: false pad: 1 kernel_size: 3 stride: 1 } }
layer { name: "conv1/bn" type: "BatchNorm" bottom: "conv1" top: "conv1" }
layer { name: "conv1/scale" type: "Scale" bottom: "conv1" top: "conv1" scale_param { bias_term: true } }
layer { name: "conv1/relu" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "dw" type: "Convolution" bottom: "conv1" top: "dw"
  convolution_param { num_output: 4 group: 4 pad: 1 kernel_size: 3 } }
layer { name: "sum" type: "Eltwise" bottom: "conv1" bottom: "dw" top: "sum" eltwise_param { operation: SUM } }
layer { name: "loc" type: "Convolution" bottom: "sum" top: "loc" convolution_param { num_output: 8 kernel_size: 1 } }
layer { name: "loc_perm" type: "Permute" bottom: "loc" top: "loc_perm"
  permute_param { order: 0 order: 2 order: 3 order: 1 } }
layer { name: "loc_flat" type: "Flatten" bottom: "loc_perm" top: "loc_flat" flatten_param { axis: 1 } }
layer { name: "conf" type: "Convolution" bottom: "sum" top: "conf" convolution_param { num_output: 6 kernel_size: 1 } }
layer { name: "conf_perm" type: "Permute" bottom: "conf" top: "conf_perm"
  permute_param { order: 0 order: 2 order: 3 order: 1 } }
layer { name: "conf_flat" type: "Flatten" bottom: "conf_perm" top: "conf_flat" flatten_param { axis: 1 } }
layer { name: "prior" type: "PriorBox" bottom: "sum" bottom: "data" top: "prior"
  prior_box_param { min_size: 4.0 max_size: 8.0 aspect_ratio: 2.0 flip: false variance: 0.1 variance: 0.2 } }
layer { name: "det" type: "DetectionOutput" bottom: "loc_flat" bottom: "conf_flat" bottom: "prior" top: "det"
  detection_output_param { num_classes: 3 nms_param { nms_threshold: 0.45 } } }
"""

CLASSIFIER = """name: "classifier"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 2 dim: 10 dim: 10 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
  param { lr_mult: 1 } param { lr_mult: 2 }
  convolution_param { num_output: 3 kernel_size: 3 stride: 2 weight_filler { type: "xavier" } } }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "norm" type: "LRN" bottom: "pool" top: "norm" lrn_param { local_size: 3 alpha: 0.0001 beta: 0.75 } }
layer { name: "fc" type: "InnerProduct" bottom: "norm" top: "fc" inner_product_param { num_output: 5 } }
layer { name: "drop" type: "Dropout" bottom: "fc" top: "fc" dropout_param { dropout_ratio: 0.5 } }
layer { name: "sig" type: "Sigmoid" bottom: "fc" top: "sig" }
layer { name: "prob" type: "Softmax" bottom: "sig" top: "prob" }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" include { phase: TRAIN } }
"""

LEGACY = """name: "legacy"
input: "data"
input_dim: 1 input_dim: 1 input_dim: 6 input_dim: 6
layers { name: "conv" type: CONVOLUTION bottom: "data" top: "conv" convolution_param { num_output: 2 kernel_size: 3 } }
layers { name: "relu" type: RELU bottom: "conv" top: "conv" }
layers { name: "ip" type: INNER_PRODUCT bottom: "conv" top: "ip" inner_product_param { num_output: 3 } }
layers { name: "prob" type: SOFTMAX bottom: "ip" top: "prob" }
"""


def _blobs(rng: np.random.Generator) -> dict[str, dict[str, list[np.ndarray]]]:
    r = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    var = np.abs(r(4)) + 0.5
    return {"ssd_block": {"conv1": [r(4, 3, 3, 3)], "conv1/bn": [r(4), var, np.array([1.0], np.float32)],
                          "conv1/scale": [r(4), r(4)], "dw": [r(4, 1, 3, 3), r(4)], "loc": [r(8, 4, 1, 1), r(8)],
                          "conf": [r(6, 4, 1, 1), r(6)]},
            "classifier": {"conv": [r(3, 2, 3, 3), r(3)], "fc": [r(5, 12), r(5)]},
            "legacy": {"conv": [r(2, 1, 3, 3), r(2)], "ip": [r(3, 32), r(3)]}}


def main() -> None:
    from pegasus.importers.caffe.loader import import_caffe
    from pegasus.importers.caffe.proto import message_classes

    classes = message_classes()
    rng = np.random.default_rng(0)
    blobs = _blobs(rng)
    for name, text in (("ssd_block", SSD), ("classifier", CLASSIFIER), ("legacy", LEGACY)):
        folder = CORPUS / "caffe" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "m.prototxt").write_text(text)
        net = classes["NetParameter"]()
        text_format.Parse(text, net)
        for layer in list(net.layer) + list(net.layers):
            for array in blobs[name].get(layer.name, []):
                blob = layer.blobs.add()
                if name == "legacy":
                    blob.num, blob.channels, blob.height, blob.width = (1,) * (4 - array.ndim) + array.shape
                else:
                    blob.shape.dim.extend(array.shape)
                blob.data.extend(array.reshape(-1).tolist())
        (folder / "m.caffemodel").write_bytes(net.SerializeToString())
        import_caffe(folder / "m.prototxt", folder / "m.caffemodel")


if __name__ == "__main__":
    main()
