"""Kernels of fused groups (a convolution with its element-wise and pooling readers: exporters/glow/fuse.py). They may
build on every other family.
"""
