"""Small helpers over llvmlite so kernels never wire phi nodes or address arithmetic by hand."""
