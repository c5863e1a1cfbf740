"""Kernels for Cortex-M CPUs with the DSP extension (SMLAD/SXTB16 paths, halfword-paired weights, pooled pairs):
implementations the select stage picks on those CPUs.
"""
