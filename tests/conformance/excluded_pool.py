"""ONNX node cases of the pool family that pegasus does not run: none, every case passes."""

EXCLUDED: dict[str, str] = {}
