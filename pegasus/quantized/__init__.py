"""Quantized models in the core: the per-tensor quantization parameters (``params``) and the rewrite
of a float graph onto integer kernels (``lower``), shared by integer inference and the exporters."""
