"""The ONNX importer: loader (model checks, input shapes, subgraph cuts) and per-family converters."""
