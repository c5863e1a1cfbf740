"""Small valid ONNX models for the corpus: a conv net (Conv, BatchNormalization, Relu, MaxPool, Gemm), a model
folding shapes (Shape, Gather, Concat, Reshape, ConstantOfShape, Expand) and one with recurrent and resize ops."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from fuzz.targets import CORPUS


def _save(graph, name: str, opset: int = 13) -> None:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    folder = CORPUS / "onnx"
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, folder / name)


def main() -> None:
    rng = np.random.default_rng(0)
    init = lambda name, *shape: numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)  # noqa: E731
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("BatchNormalization", ["c", "s", "o", "m", "v"], ["n"]),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["g"], transB=1),
             helper.make_node("Softmax", ["g"], ["y"])]
    inits = [init("w", 4, 3, 3, 3), init("b", 4), init("s", 4), init("o", 4), init("m", 4),
             numpy_helper.from_array(np.abs(rng.standard_normal(4)).astype(np.float32) + 0.5, "v"),
             init("fw", 5, 64), init("fb", 5)]
    _save(helper.make_graph(nodes, "convnet", [x], [y], inits), "convnet.onnx")

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    nodes = [helper.make_node("Shape", ["x"], ["sh"]),
             helper.make_node("Gather", ["sh", "zero"], ["d0"], axis=0),
             helper.make_node("Concat", ["d0", "three", "two"], ["ns"], axis=0),
             helper.make_node("Reshape", ["x", "ns"], ["r"]),
             helper.make_node("ConstantOfShape", ["ns"], ["k"],
                              value=numpy_helper.from_array(np.array([0.5], np.float32))),
             helper.make_node("Add", ["r", "k"], ["a"]),
             helper.make_node("Expand", ["a", "big"], ["e"]),
             helper.make_node("Tile", ["e", "reps"], ["t"]),
             helper.make_node("Pad", ["t", "pads"], ["y"])]
    ints = lambda name, values: numpy_helper.from_array(np.array(values, np.int64), name)  # noqa: E731
    inits = [ints("zero", [0]), ints("three", [3]), ints("two", [2]), ints("big", [2, 2, 3, 2]),
             ints("reps", [1, 1, 1, 2]), ints("pads", [0, 0, 1, 0, 0, 0, 1, 0])]
    _save(helper.make_graph(nodes, "shapes", [x], [y], inits), "shapes.onnx")

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 1, 4])
    nodes = [helper.make_node("LSTM", ["x", "W", "R", "B"], ["ys", "yh"], hidden_size=5),
             helper.make_node("Squeeze", ["ys", "ax"], ["s"]),
             helper.make_node("Unsqueeze", ["s", "ax0"], ["u"]),
             helper.make_node("Resize", ["u", "", "scales"], ["y"], mode="nearest")]
    inits = [init("W", 1, 20, 4), init("R", 1, 20, 5), init("B", 1, 40), ints("ax", [1]), ints("ax0", [0]),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")]
    _save(helper.make_graph(nodes, "recurrent", [x], [y], inits), "recurrent.onnx")


if __name__ == "__main__":
    main()
