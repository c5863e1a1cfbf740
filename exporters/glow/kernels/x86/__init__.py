"""Kernels for x86-64 hosts (AVX/AVX-512 channel lanes, PMADDWD dot products): implementations the select stage picks
on x86 targets.
"""
