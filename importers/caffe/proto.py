"""Caffe's protobuf messages, declared here for the fields pegasus reads, built as descriptors in Python.

Caffe models are protobuf: a text ``.prototxt`` (the network) and a binary ``.caffemodel`` (the same
message with the weights in each layer's ``blobs``). Rather than ship Caffe's ``caffe.proto`` or need
``protoc``, the messages are declared below in a one-line-per-field form (``optional uint32 num_output =
1``) and turned into a ``FileDescriptorProto`` in code, then into message classes with protobuf's
``message_factory``. Field names and numbers are Caffe's (BVLC ``caffe.proto``); the SSD layers (Permute,
Normalize, PriorBox, DetectionOutput) use the numbers of the SSD fork that introduced them, Interp those
of DeepLab's and Upsample those of the YOLOv3 Caffe ports. Besides the parameters of the supported
layers, the training-only fields that deploy prototxts still carry (``param { lr_mult }``, fillers,
``engine``, ``include { phase }``) are declared so such files parse.

``--proto lstm_caffe`` (Acuity's flag for LSTM models) selects the same declarations: they include
``recurrent_param``, which Caffe's LSTM layer uses.
"""

from __future__ import annotations

import functools
import re

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "caffe"
PROTOS = ("caffe", "lstm_caffe")

#: enum name -> [(value name, number)]; ``Msg.Enum`` names are nested in message Msg
_ENUMS: dict[str, list[tuple[str, int]]] = {
    "Phase": [("TRAIN", 0), ("TEST", 1)],
    "Type": [("DOUBLE", 0), ("FLOAT", 1), ("FLOAT16", 2), ("INT", 3), ("UINT", 4)],
    "ParamSpec.DimCheckMode": [("STRICT", 0), ("PERMISSIVE", 1)],
    "FillerParameter.VarianceNorm": [("FAN_IN", 0), ("FAN_OUT", 1), ("AVERAGE", 2)],
    "ConvolutionParameter.Engine": [("DEFAULT", 0), ("CAFFE", 1), ("CUDNN", 2)],
    "PoolingParameter.PoolMethod": [("MAX", 0), ("AVE", 1), ("STOCHASTIC", 2)],
    "PoolingParameter.Engine": [("DEFAULT", 0), ("CAFFE", 1), ("CUDNN", 2)],
    "ReLUParameter.Engine": [("DEFAULT", 0), ("CAFFE", 1), ("CUDNN", 2)],
    "SigmoidParameter.Engine": [("DEFAULT", 0), ("CAFFE", 1), ("CUDNN", 2)],
    "TanHParameter.Engine": [("DEFAULT", 0), ("CAFFE", 1), ("CUDNN", 2)],
    "SoftmaxParameter.Engine": [("DEFAULT", 0), ("CAFFE", 1), ("CUDNN", 2)],
    "LRNParameter.NormRegion": [("ACROSS_CHANNELS", 0), ("WITHIN_CHANNEL", 1)],
    "LRNParameter.Engine": [("DEFAULT", 0), ("CAFFE", 1), ("CUDNN", 2)],
    "EltwiseParameter.EltwiseOp": [("PROD", 0), ("SUM", 1), ("MAX", 2)],
    "PriorBoxParameter.CodeType": [("CORNER", 1), ("CENTER_SIZE", 2), ("CORNER_SIZE", 3)],
    "V1LayerParameter.LayerType": [
        ("NONE", 0), ("ABSVAL", 35), ("ACCURACY", 1), ("ARGMAX", 30), ("BNLL", 2), ("CONCAT", 3),
        ("CONTRASTIVE_LOSS", 37), ("CONVOLUTION", 4), ("DATA", 5), ("DECONVOLUTION", 39), ("DROPOUT", 6),
        ("DUMMY_DATA", 32), ("EUCLIDEAN_LOSS", 7), ("ELTWISE", 25), ("EXP", 38), ("FLATTEN", 8),
        ("HDF5_DATA", 9), ("HDF5_OUTPUT", 10), ("HINGE_LOSS", 28), ("IM2COL", 11), ("IMAGE_DATA", 12),
        ("INFOGAIN_LOSS", 13), ("INNER_PRODUCT", 14), ("LRN", 15), ("MEMORY_DATA", 29),
        ("MULTINOMIAL_LOGISTIC_LOSS", 16), ("MVN", 34), ("POOLING", 17), ("POWER", 26), ("RELU", 18),
        ("SIGMOID", 19), ("SIGMOID_CROSS_ENTROPY_LOSS", 27), ("SILENCE", 36), ("SOFTMAX", 20),
        ("SOFTMAX_LOSS", 21), ("SPLIT", 22), ("SLICE", 33), ("TANH", 23), ("WINDOW_DATA", 24), ("THRESHOLD", 31)],
}

#: the parameter messages each layer type reads (LayerParameter field -> message), shared by the current
#: and the V1 layer messages (V1 numbers in the second column; 0: not in V1)
_LAYER_PARAMS = [
    ("transform_param", "TransformationParameter", 100, 36),
    ("loss_param", "LossParameter", 101, 42),
    ("batch_norm_param", "BatchNormParameter", 139, 0),
    ("bias_param", "BiasParameter", 141, 0),
    ("clip_param", "ClipParameter", 148, 0),
    ("concat_param", "ConcatParameter", 104, 9),
    ("convolution_param", "ConvolutionParameter", 106, 10),
    ("crop_param", "CropParameter", 144, 0),
    ("dropout_param", "DropoutParameter", 108, 12),
    ("eltwise_param", "EltwiseParameter", 110, 24),
    ("elu_param", "ELUParameter", 140, 0),
    ("exp_param", "ExpParameter", 111, 41),
    ("flatten_param", "FlattenParameter", 135, 0),
    ("inner_product_param", "InnerProductParameter", 117, 17),
    ("input_param", "InputParameter", 143, 0),
    ("log_param", "LogParameter", 134, 0),
    ("lrn_param", "LRNParameter", 118, 18),
    ("pooling_param", "PoolingParameter", 121, 19),
    ("power_param", "PowerParameter", 122, 21),
    ("prelu_param", "PReLUParameter", 131, 0),
    ("recurrent_param", "RecurrentParameter", 146, 0),
    ("relu_param", "ReLUParameter", 123, 30),
    ("reshape_param", "ReshapeParameter", 133, 0),
    ("scale_param", "ScaleParameter", 142, 0),
    ("sigmoid_param", "SigmoidParameter", 124, 38),
    ("softmax_param", "SoftmaxParameter", 125, 39),
    ("slice_param", "SliceParameter", 126, 31),
    ("tanh_param", "TanHParameter", 127, 37),
    ("permute_param", "PermuteParameter", 202, 0),
    ("prior_box_param", "PriorBoxParameter", 203, 0),
    ("detection_output_param", "DetectionOutputParameter", 204, 0),
    ("norm_param", "NormalizeParameter", 206, 0),
    ("interp_param", "InterpParameter", 143 + 2000, 0),  # 143 in DeepLab, which clashes with input_param
    ("upsample_param", "UpsampleParameter", 149, 0),
]

_MESSAGES: dict[str, list[str]] = {
    "BlobShape": ["repeated int64 dim = 1 packed"],
    "BlobProto": [
        "optional BlobShape shape = 7", "repeated float data = 5 packed", "repeated float diff = 6 packed",
        "repeated double double_data = 8 packed", "repeated double double_diff = 9 packed",
        "optional Type raw_data_type = 10", "optional bytes raw_data = 12",
        "optional int32 num = 1", "optional int32 channels = 2", "optional int32 height = 3",
        "optional int32 width = 4"],
    "NetParameter": [
        "optional string name = 1", "repeated string input = 3", "repeated BlobShape input_shape = 8",
        "repeated int32 input_dim = 4", "optional bool force_backward = 5", "optional NetState state = 6",
        "optional bool debug_info = 7", "repeated LayerParameter layer = 100",
        "repeated V1LayerParameter layers = 2"],
    "NetState": ["optional Phase phase = 1 default TEST", "optional int32 level = 2", "repeated string stage = 3"],
    "NetStateRule": ["optional Phase phase = 1", "optional int32 min_level = 2", "optional int32 max_level = 3",
                     "repeated string stage = 4", "repeated string not_stage = 5"],
    "ParamSpec": ["optional string name = 1", "optional DimCheckMode share_mode = 2",
                  "optional float lr_mult = 3 default 1", "optional float decay_mult = 4 default 1"],
    "FillerParameter": [
        "optional string type = 1 default constant", "optional float value = 2", "optional float min = 3",
        "optional float max = 4 default 1", "optional float mean = 5", "optional float std = 6 default 1",
        "optional int32 sparse = 7 default -1", "optional VarianceNorm variance_norm = 8"],
    "LayerParameter": [
        "optional string name = 1", "optional string type = 2", "repeated string bottom = 3",
        "repeated string top = 4", "optional Phase phase = 10", "repeated float loss_weight = 5",
        "repeated ParamSpec param = 6", "repeated BlobProto blobs = 7", "repeated bool propagate_down = 11",
        "repeated NetStateRule include = 8", "repeated NetStateRule exclude = 9",
        *(f"optional {message} {field} = {number}" for field, message, number, _ in _LAYER_PARAMS)],
    "V1LayerParameter": [
        "repeated string bottom = 2", "repeated string top = 3", "optional string name = 4",
        "repeated NetStateRule include = 32", "repeated NetStateRule exclude = 33",
        "optional LayerType type = 5", "repeated BlobProto blobs = 6", "repeated string param = 1001",
        "repeated float blobs_lr = 7", "repeated float weight_decay = 8", "repeated float loss_weight = 35",
        *(f"optional {message} {field} = {v1}" for field, message, _, v1 in _LAYER_PARAMS if v1)],
    "TransformationParameter": [
        "optional float scale = 1 default 1", "optional bool mirror = 2", "optional uint32 crop_size = 3",
        "optional string mean_file = 4", "repeated float mean_value = 5", "optional bool force_color = 6",
        "optional bool force_gray = 7"],
    "LossParameter": ["optional int32 ignore_label = 1", "optional bool normalize = 2"],
    "BatchNormParameter": ["optional bool use_global_stats = 1",
                           "optional float moving_average_fraction = 2 default 0.999",
                           "optional float eps = 3 default 1e-5"],
    "BiasParameter": ["optional int32 axis = 1 default 1", "optional int32 num_axes = 2 default 1",
                      "optional FillerParameter filler = 3"],
    "ClipParameter": ["optional float min = 1", "optional float max = 2"],
    "ConcatParameter": ["optional int32 axis = 2 default 1", "optional uint32 concat_dim = 1 default 1"],
    "ConvolutionParameter": [
        "optional uint32 num_output = 1", "optional bool bias_term = 2 default true", "repeated uint32 pad = 3",
        "repeated uint32 kernel_size = 4", "repeated uint32 stride = 6", "repeated uint32 dilation = 18",
        "optional uint32 pad_h = 9", "optional uint32 pad_w = 10", "optional uint32 kernel_h = 11",
        "optional uint32 kernel_w = 12", "optional uint32 stride_h = 13", "optional uint32 stride_w = 14",
        "optional uint32 group = 5 default 1", "optional FillerParameter weight_filler = 7",
        "optional FillerParameter bias_filler = 8", "optional Engine engine = 15",
        "optional int32 axis = 16 default 1", "optional bool force_nd_im2col = 17"],
    "CropParameter": ["optional int32 axis = 1 default 2", "repeated uint32 offset = 2"],
    "DropoutParameter": ["optional float dropout_ratio = 1 default 0.5"],
    "EltwiseParameter": ["optional EltwiseOp operation = 1 default SUM", "repeated float coeff = 2",
                         "optional bool stable_prod_grad = 3 default true"],
    "ELUParameter": ["optional float alpha = 1 default 1"],
    "ExpParameter": ["optional float base = 1 default -1", "optional float scale = 2 default 1",
                     "optional float shift = 3"],
    "FlattenParameter": ["optional int32 axis = 1 default 1", "optional int32 end_axis = 2 default -1"],
    "InnerProductParameter": [
        "optional uint32 num_output = 1", "optional bool bias_term = 2 default true",
        "optional FillerParameter weight_filler = 3", "optional FillerParameter bias_filler = 4",
        "optional int32 axis = 5 default 1", "optional bool transpose = 6"],
    "InputParameter": ["repeated BlobShape shape = 1"],
    "LogParameter": ["optional float base = 1 default -1", "optional float scale = 2 default 1",
                     "optional float shift = 3"],
    "LRNParameter": ["optional uint32 local_size = 1 default 5", "optional float alpha = 2 default 1",
                     "optional float beta = 3 default 0.75", "optional NormRegion norm_region = 4",
                     "optional float k = 5 default 1", "optional Engine engine = 6"],
    "PoolingParameter": [
        "optional PoolMethod pool = 1", "optional uint32 pad = 4", "optional uint32 pad_h = 9",
        "optional uint32 pad_w = 10", "optional uint32 kernel_size = 2", "optional uint32 kernel_h = 5",
        "optional uint32 kernel_w = 6", "optional uint32 stride = 3 default 1", "optional uint32 stride_h = 7",
        "optional uint32 stride_w = 8", "optional Engine engine = 11", "optional bool global_pooling = 12",
        "optional bool ceil_mode = 13 default true"],  # ceil_mode: OpenCV's extension
    "PowerParameter": ["optional float power = 1 default 1", "optional float scale = 2 default 1",
                       "optional float shift = 3"],
    "PReLUParameter": ["optional FillerParameter filler = 1", "optional bool channel_shared = 2"],
    "RecurrentParameter": [
        "optional uint32 num_output = 1", "optional FillerParameter weight_filler = 2",
        "optional FillerParameter bias_filler = 3", "optional bool debug_info = 4", "optional bool expose_hidden = 5"],
    "ReLUParameter": ["optional float negative_slope = 1", "optional Engine engine = 2"],
    "ReshapeParameter": ["optional BlobShape shape = 1", "optional int32 axis = 2",
                         "optional int32 num_axes = 3 default -1"],
    "ScaleParameter": ["optional int32 axis = 1 default 1", "optional int32 num_axes = 2 default 1",
                       "optional FillerParameter filler = 3", "optional bool bias_term = 4",
                       "optional FillerParameter bias_filler = 5"],
    "SigmoidParameter": ["optional Engine engine = 1"],
    "SoftmaxParameter": ["optional Engine engine = 1", "optional int32 axis = 2 default 1"],
    "SliceParameter": ["optional int32 axis = 3 default 1", "repeated uint32 slice_point = 2",
                       "optional uint32 slice_dim = 1 default 1"],
    "TanHParameter": ["optional Engine engine = 1"],
    "PermuteParameter": ["repeated uint32 order = 1"],
    "NormalizeParameter": ["optional bool across_spatial = 1 default true",
                           "optional FillerParameter scale_filler = 2",
                           "optional bool channel_shared = 3 default true", "optional float eps = 4 default 1e-10"],
    "PriorBoxParameter": [
        "repeated float min_size = 1", "repeated float max_size = 2", "repeated float aspect_ratio = 3",
        "optional bool flip = 4 default true", "optional bool clip = 5", "repeated float variance = 6",
        "optional uint32 img_size = 7", "optional uint32 img_h = 8", "optional uint32 img_w = 9",
        "optional float step = 10", "optional float step_h = 11", "optional float step_w = 12",
        "optional float offset = 13 default 0.5"],
    "NonMaximumSuppressionParameter": ["optional float nms_threshold = 1 default 0.3", "optional int32 top_k = 2",
                                       "optional float eta = 3 default 1"],
    "SaveOutputParameter": ["optional string output_directory = 1", "optional string output_name_prefix = 2",
                            "optional string output_format = 3", "optional string label_map_file = 4",
                            "optional string name_size_file = 5", "optional uint32 num_test_image = 6"],
    "DetectionOutputParameter": [
        "optional uint32 num_classes = 1", "optional bool share_location = 2 default true",
        "optional int32 background_label_id = 3", "optional NonMaximumSuppressionParameter nms_param = 4",
        "optional SaveOutputParameter save_output_param = 5",
        "optional PriorBoxParameter.CodeType code_type = 6 default CORNER", "optional int32 keep_top_k = 7 default -1",
        "optional bool variance_encoded_in_target = 8", "optional float confidence_threshold = 9"],
    "InterpParameter": ["optional int32 height = 1", "optional int32 width = 2", "optional int32 zoom_factor = 3",
                        "optional int32 shrink_factor = 4", "optional int32 pad_beg = 5", "optional int32 pad_end = 6"],
    "UpsampleParameter": ["optional int32 scale = 1 default 2", "optional int32 scale_h = 2",
                          "optional int32 scale_w = 3"],
}

_SCALARS = {name: getattr(descriptor_pb2.FieldDescriptorProto, f"TYPE_{name.upper()}")
            for name in ("double", "float", "int64", "uint64", "int32", "uint32", "bool", "string", "bytes")}
_FIELD = re.compile(r"(optional|repeated) ([\w.]+) (\w+) = (\d+)( packed)?(?: default (\S+))?$")


def _field(message: str, spec: str) -> descriptor_pb2.FieldDescriptorProto:
    match = _FIELD.match(spec)
    if match is None:
        raise ValueError(f"bad field declaration in {message}: {spec!r}")
    label, type_name, name, number, packed, default = match.groups()
    field = descriptor_pb2.FieldDescriptorProto(name=name, number=int(number))
    field.label = (descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED if label == "repeated"
                   else descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    if type_name in _SCALARS:
        field.type = _SCALARS[type_name]
    else:
        enum = next((e for e in (f"{message}.{type_name}", type_name) if e in _ENUMS), None)
        field.type = (descriptor_pb2.FieldDescriptorProto.TYPE_ENUM if enum
                      else descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE)
        field.type_name = f".{PACKAGE}.{enum or type_name}"
    if packed:
        field.options.packed = True
    if default is not None:
        field.default_value = default
    return field


def _enum(name: str, values: list[tuple[str, int]]) -> descriptor_pb2.EnumDescriptorProto:
    enum = descriptor_pb2.EnumDescriptorProto(name=name)
    for value, number in values:
        enum.value.add(name=value, number=number)
    return enum


def file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """The declarations above as one proto2 file, package ``caffe``."""
    fdp = descriptor_pb2.FileDescriptorProto(name="pegasus/caffe.proto", package=PACKAGE, syntax="proto2")
    for name, values in _ENUMS.items():
        if "." not in name:
            fdp.enum_type.append(_enum(name, values))
    for message, fields in _MESSAGES.items():
        proto = fdp.message_type.add(name=message)
        proto.field.extend(_field(message, spec) for spec in fields)
        for name, values in _ENUMS.items():
            owner, _, enum = name.partition(".")
            if owner == message:
                proto.enum_type.append(_enum(enum, values))
    return fdp


@functools.cache
def message_classes(proto: str = "caffe") -> dict[str, type]:
    """Message classes by name (``NetParameter``, ``BlobProto``, ...) for ``--proto`` ``proto``, built on
    first use in a pool of their own."""
    if proto not in PROTOS:
        raise ValueError(f"unknown Caffe proto '{proto}'")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_descriptor())
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
            for name in _MESSAGES}
