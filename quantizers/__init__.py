"""Quantizers: calibration observers, quantization schemes and the editable .quantize file."""
