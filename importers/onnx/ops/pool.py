"""ONNX converters for the pool family. The attributes only grew over the opsets (storage_order and
the Indices output in 8, ceil_mode in 10, dilations in 10/19), so one 1:1 mapping covers them all."""

from pegasus.importers.onnx.registry import direct

direct("MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool")
