"""Portable integer kernels (the quantized ops of pegasus/ops/integer*.py): the reference integer arithmetic, bit-exact
with the NumPy reference. They never import x86/ or cortex_m/; an ISA-specific path is an implementation of its own
there, chosen by the select stage (schedule/select.py).
"""
