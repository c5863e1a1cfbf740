"""Glow-format ahead-of-time bundles: LLVM IR built with llvmlite, compiled for the target CPU, plus the
header, weights, example program and memory report Glow's users expect."""
