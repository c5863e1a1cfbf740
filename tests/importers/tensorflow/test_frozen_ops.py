"""Every TensorFlow op the importer covers, in tf.function graphs frozen with convert_variables_to_constants_v2
(random weights), imported and compared with TensorFlow's own outputs (rtol 1e-4, atol 1e-5; integer outputs
equal); NCHW convolutions and pools against TensorFlow's NHWC kernels between transposes."""

from __future__ import annotations

import pytest

from pegasus.importers.tensorflow.reader import read_tensorflow
from tests.importers.tensorflow import models
from tests.importers.tensorflow.harness import cached_case, check_case

pytestmark = pytest.mark.xdist_group("tensorflow")

FAMILIES = (models.conv_ops, models.conv_nchw, models.linear_ops, models.unary_ops, models.binary_ops,
            models.reduce_ops, models.pool_ops, models.shape_ops, models.movement_ops, models.small_cnn)

#: the ops issue 12 lists for the TensorFlow import
ISSUE_OPS = set("""Conv2D DepthwiseConv2dNative Conv2DBackpropInput BiasAdd MatMul BatchMatMulV2 Add AddV2 AddN Sub
Mul RealDiv Maximum Minimum SquaredDifference Relu Relu6 Elu Selu LeakyRelu Sigmoid Tanh Softmax LogSoftmax Exp Log
Sqrt Rsqrt Square Pow Abs Neg MaxPool AvgPool Mean Sum Max Min Prod ConcatV2 Reshape Squeeze ExpandDims Transpose
Pad PadV2 MirrorPad StridedSlice Slice Split SplitV Pack Unpack Tile Fill ResizeBilinear ResizeNearestNeighbor
DepthToSpace SpaceToDepth ArgMax Cast GatherV2 Einsum Identity FusedBatchNormV3""".split())


@pytest.mark.parametrize("builder", FAMILIES, ids=lambda b: b.__name__)
def test_family_matches_tensorflow(builder):
    check_case(cached_case(builder))


def test_models_cover_the_issue_ops():
    found = set()
    for builder in FAMILIES:
        found |= {node.op_type for node in read_tensorflow(cached_case(builder).model).nodes}
    assert ISSUE_OPS <= found, sorted(ISSUE_OPS - found)


def test_bias_and_batch_norm_fold_into_the_conv():
    """Conv2D + BiasAdd + FusedBatchNormV3 (and Keras' conv + BatchNormalization) import as one Conv layer."""
    from pegasus.importers.tensorflow.loader import import_tensorflow

    case = cached_case(models.conv_ops)
    graph = import_tensorflow(case.model, **case.options)
    producer = {out: node for node in graph.nodes for out in node.outputs}
    assert producer["Identity_1"].op == "Conv"                 # conv -> fused batch norm
    assert producer["BiasAdd"].op == "Conv"                    # conv -> bias add (then relu, batch norm)
    case = cached_case(models.small_cnn)
    ops = [node.op for node in import_tensorflow(case.model, **case.options).nodes]
    assert ops == ["Conv", "Clip", "Conv", "Conv", "Relu", "MaxPool", "ReduceMean", "Gemm", "Softmax"]
