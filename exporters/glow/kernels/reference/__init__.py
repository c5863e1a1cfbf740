"""Portable float kernels (and the shape, copy and element-wise ops of every dtype): LLVM vector IR any target
compiles. They never import x86/ or cortex_m/.
"""
