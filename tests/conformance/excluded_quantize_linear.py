"""QuantizeLinear/DequantizeLinear cases we do not run: quantized types pegasus has no dtype for.

pegasus quantizes to 8/16/32-bit integers; float8, float4 and sub-byte (int4/int2) formats have no
NumPy type and no arithmetic on our microcontroller targets. Blocked quantization is supported.
"""

_FLOAT8 = "float8 quantized type has no pegasus dtype (pegasus quantizes to 8/16/32-bit integers)"
_FLOAT4 = "float4e2m1 quantized type has no pegasus dtype (pegasus quantizes to 8/16/32-bit integers)"
_SUB_BYTE = "sub-byte int4/int2 quantized types have no pegasus dtype (pegasus quantizes to 8/16/32-bit integers)"

EXCLUDED = {
    "test_quantizelinear_e4m3fn": _FLOAT8,
    "test_quantizelinear_e5m2": _FLOAT8,
    "test_quantizelinear_float4e2m1": _FLOAT4,
    "test_quantizelinear_uint4": _SUB_BYTE,
    "test_quantizelinear_int4": _SUB_BYTE,
    "test_quantizelinear_uint2": _SUB_BYTE,
    "test_quantizelinear_int2": _SUB_BYTE,
    "test_dequantizelinear_e4m3fn": _FLOAT8,
    "test_dequantizelinear_e4m3fn_float16": _FLOAT8,
    "test_dequantizelinear_e4m3fn_zero_point": _FLOAT8,
    "test_dequantizelinear_e5m2": _FLOAT8,
    "test_dequantizelinear_float4e2m1": _FLOAT4,
    "test_dequantizelinear_uint4": _SUB_BYTE,
    "test_dequantizelinear_int4": _SUB_BYTE,
    "test_dequantizelinear_uint2": _SUB_BYTE,
    "test_dequantizelinear_int2": _SUB_BYTE,
}
