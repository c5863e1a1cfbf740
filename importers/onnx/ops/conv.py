"""ONNX converters for the conv family: Conv and ConvTranspose map 1:1 onto the registry ops (their
attributes have kept the same meaning since opset 1; kernel_shape may be left to the weights)."""

from pegasus.importers.onnx.registry import direct

direct("Conv", "ConvTranspose")
