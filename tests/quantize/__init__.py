"""Tests of ``pegasus quantize``: observers, schemes, calibration and the .quantize file."""
