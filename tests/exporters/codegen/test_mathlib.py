"""The bundle's own math library (exporters/glow/llvm/mathlib.py) against independent references.

Every function is compiled for the host (llvmlite MCJIT, after the same -O3 pipeline as bundles),
called through ctypes on dense grids, random float32 bit patterns and special values, and compared with
float64 NumPy / ``math.erf`` (accuracy in float32 ulps; NaN, infinities and signed zeros exactly) or,
for the exact functions (sqrt, floor, ...), with NumPy's float32 result bit for bit. Another test
compiles every function for Cortex-M0/M4/M7/M33, AArch64, x86-64 and i386 and reads the object's symbol
table: nothing from libm may be left undefined.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from dataclasses import dataclass

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

from pegasus.exporters.glow.compile import compile_object, optimize
from pegasus.exporters.glow.llvm.loops import for_range
from pegasus.exporters.glow.llvm.mathlib import MathLib
from pegasus.exporters.glow.target import resolve_target
from tests.support.objects import undefined_symbols

F32, I32 = ir.FloatType(), ir.IntType(32)
F32_PTR = F32.as_pointer()
RNG_SEED = 1234


def _erf64(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _sigmoid64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        e = np.exp(-np.abs(x))
        return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


FLOAT_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class Case:
    """A function under test: its float64 reference, the input range (random float32 bit patterns are
    drawn from it), the range of the dense grid (default: the input range) and the largest error
    allowed, in float32 ulps of the reference."""

    reference: Callable[..., np.ndarray]
    low: float
    high: float
    max_ulp: float
    dense: tuple[float, float] | None = None


APPROXIMATE = {
    "exp": Case(np.exp, -105, 90, 2),
    "expm1": Case(np.expm1, -20, 90, 2),
    "log": Case(np.log, 0, FLOAT_MAX, 2, dense=(0, 1e4)),
    "log1p": Case(np.log1p, -1, FLOAT_MAX, 3, dense=(-1, 100)),
    "tanh": Case(np.tanh, -12, 12, 3),
    "sigmoid": Case(_sigmoid64, -110, 110, 3),
    "softplus": Case(lambda x: np.logaddexp(0, x), -110, 110, 3),
    "erf": Case(_erf64, -5, 5, 3),
    "sin": Case(np.sin, -FLOAT_MAX, FLOAT_MAX, 3, dense=(-1e4, 1e4)),
    "cos": Case(np.cos, -FLOAT_MAX, FLOAT_MAX, 3, dense=(-1e4, 1e4)),
    "tan": Case(np.tan, -FLOAT_MAX, FLOAT_MAX, 5, dense=(-100, 100)),
    "atan": Case(np.arctan, -FLOAT_MAX, FLOAT_MAX, 3, dense=(-50, 50)),
    "rsqrt": Case(lambda x: 1 / np.sqrt(x), 0, FLOAT_MAX, 2, dense=(0, 1e4)),
}
EXACT = {
    "sqrt": np.sqrt, "soft_sqrt": np.sqrt, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
    "round_half_even": np.rint,
}
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1e-45, -1e-45,
                    1.1754942e-38, 3.4028235e38, -3.4028235e38, 88.72283, 88.72284, -87.33655, -103.97208,
                    -104.0, 1e-30, 7.0, 8388607.5, -8388609.0, 16777217.0], dtype=np.float32)


def _unary_kernel(module: ir.Module, name: str, emit: Callable[[ir.IRBuilder, ir.Value], ir.Value]) -> None:
    """``void run_<name>(float *out, const float *in, int n)`` applying ``emit`` element-wise."""
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), [F32_PTR, F32_PTR, I32]), name=f"run_{name}")
    out, src, count = function.args
    b = ir.IRBuilder(function.append_basic_block("entry"))
    with for_range(b, count) as i:
        b.store(emit(b, b.load(b.gep(src, [i]))), b.gep(out, [i]))
    b.ret_void()


def _binary_kernel(module: ir.Module, name: str, emit: Callable[..., ir.Value]) -> None:
    signature = ir.FunctionType(ir.VoidType(), [F32_PTR, F32_PTR, F32_PTR, I32])
    function = ir.Function(module, signature, name=f"run_{name}")
    out, first, second, count = function.args
    b = ir.IRBuilder(function.append_basic_block("entry"))
    with for_range(b, count) as i:
        b.store(emit(b, b.load(b.gep(first, [i])), b.load(b.gep(second, [i]))), b.gep(out, [i]))
    b.ret_void()


UNARY_NAMES = [*APPROXIMATE, *[name for name in EXACT if name != "soft_sqrt"], "abs"]
BINARY_NAMES = ["pow", "max", "min"]


def _build(module: ir.Module, target) -> None:
    """One kernel per math function (plus the soft-float sqrt, forced on, as ``soft_sqrt``)."""
    math_lib = MathLib(module, target)
    for name in UNARY_NAMES:
        _unary_kernel(module, name, getattr(math_lib, name))
    for name in BINARY_NAMES:
        _binary_kernel(module, name, getattr(math_lib, name))
    soft = MathLib(module, target)
    soft.hardware_sqrt = False
    _unary_kernel(module, "soft_sqrt", soft.sqrt)


class HostMath:
    """The kernels compiled for the host and callable on NumPy arrays."""

    def __init__(self) -> None:
        self.target = resolve_target(relocation="pic")   # MCJIT places sections anywhere in memory
        module = ir.Module(name="mathlib_test")
        module.triple = self.target.triple
        _build(module, self.target)
        # MCJIT places each section where mmap gives room: in a test process that has mapped gigabytes (the
        # frameworks, earlier tests) .text and .rodata can land more than 2 GB apart, beyond the small code
        # model's 32-bit PC-relative reach (LLVM asserts isInt<32> in resolveX86_64Relocation): the JIT's own
        # code model ('jitdefault': large on x86-64) reaches anywhere
        self.target.machine()   # initialises LLVM's targets
        machine = llvm.Target.from_triple(self.target.triple).create_target_machine(
            cpu=self.target.cpu, features=self.target.features, opt=3, reloc=self.target.relocation,
            codemodel="jitdefault", jit=True)
        self.engine = llvm.create_mcjit_compiler(optimize(module, self.target), machine)
        self.engine.finalize_object()

    def __call__(self, name: str, *arrays: np.ndarray) -> np.ndarray:
        inputs = [np.ascontiguousarray(a, dtype=np.float32) for a in arrays]
        out = np.empty_like(inputs[0])
        pointer = ctypes.POINTER(ctypes.c_float)
        argtypes = [pointer] * (len(inputs) + 1) + [ctypes.c_int32]
        kernel = ctypes.CFUNCTYPE(None, *argtypes)(self.engine.get_function_address(f"run_{name}"))
        kernel(*(a.ctypes.data_as(pointer) for a in (out, *inputs)), len(out))
        return out


@pytest.fixture(scope="module")
def host() -> HostMath:
    return HostMath()


def _grid(case: Case) -> np.ndarray:
    """A dense grid over the case's range, random float32 bit patterns of the same range, and the
    special values that fall inside it."""
    rng = np.random.default_rng(RNG_SEED)
    dense = np.linspace(*(case.dense or (case.low, case.high)), 200_001, dtype=np.float32)
    bits = rng.integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    inside = np.isfinite(bits) & (bits >= case.low) & (bits <= case.high)
    special = SPECIAL[np.isfinite(SPECIAL) & (SPECIAL >= case.low) & (SPECIAL <= case.high)]
    return np.concatenate([dense, bits[inside], special])


def ulp_error(got: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """|got - reference| in ulps of the float32-rounded reference (0 where both are the same infinity)."""
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = reference.astype(np.float32)
        error = np.abs(got.astype(np.float64) - reference) / np.spacing(np.abs(rounded)).astype(np.float64)
    return np.where(np.isinf(got) & (got == rounded), 0.0, error)


def relative_error(got: np.ndarray, reference: np.ndarray) -> float:
    normal = np.abs(reference) >= np.finfo(np.float32).tiny
    with np.errstate(over="ignore"):
        representable = np.abs(reference) <= np.finfo(np.float32).max
    keep = normal & representable
    return float(np.max(np.abs(got[keep].astype(np.float64) - reference[keep]) / np.abs(reference[keep])))


@pytest.mark.parametrize("name", sorted(APPROXIMATE))
def test_accuracy(host: HostMath, name: str) -> None:
    case = APPROXIMATE[name]
    x = _grid(case)
    with np.errstate(all="ignore"):
        reference = case.reference(x.astype(np.float64))
    got = host(name, x)
    error = ulp_error(got, reference)
    worst = int(np.argmax(error))
    assert error[worst] <= case.max_ulp, f"{name}({x[worst]!r}) = {got[worst]!r}, expected {reference[worst]!r}"
    assert relative_error(got, reference) <= 1e-6


@pytest.mark.parametrize("name", sorted(EXACT))
def test_exact(host: HostMath, name: str) -> None:
    rng = np.random.default_rng(RNG_SEED)
    bits = rng.integers(0, 2 ** 32, 300_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    halves = np.arange(-2000, 2000, dtype=np.float32) / 4
    x = np.concatenate([bits, halves, np.linspace(-1e4, 1e4, 100_001, dtype=np.float32), SPECIAL])
    with np.errstate(invalid="ignore"):
        expected = EXACT[name](x)
    got = host(name, x)
    np.testing.assert_array_equal(got, expected)
    numbers = ~np.isnan(expected)       # (a NaN's sign bit means nothing)
    np.testing.assert_array_equal(np.signbit(got[numbers]), np.signbit(expected[numbers]))


@pytest.mark.parametrize("name", sorted(APPROXIMATE))
def test_special_values(host: HostMath, name: str) -> None:
    """NaN stays NaN; infinities and signed zeros come out as in the float64 reference; the overflow,
    underflow and huge-argument edges stay within the function's ulp budget."""
    case = APPROXIMATE[name]
    with np.errstate(all="ignore"):
        reference = case.reference(SPECIAL.astype(np.float64))
        expected = reference.astype(np.float32)
    got = host(name, SPECIAL)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    exact = np.isinf(expected) | (expected == 0)
    np.testing.assert_array_equal(got[exact], expected[exact])
    np.testing.assert_array_equal(np.signbit(got[exact]), np.signbit(expected[exact]))
    approximate = np.isfinite(expected) & ~exact
    assert np.all(ulp_error(got[approximate], reference[approximate]) <= case.max_ulp)


def test_abs(host: HostMath) -> None:
    np.testing.assert_array_equal(host("abs", SPECIAL), np.abs(SPECIAL))
    np.testing.assert_array_equal(np.signbit(host("abs", SPECIAL)), np.signbit(np.abs(SPECIAL)))


def _pow_reference(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.power(x.astype(np.float64), y.astype(np.float64))


def test_pow_accuracy(host: HostMath) -> None:
    """Real exponents: exp(y·log x) loses about |y·ln x| ulp; integer exponents (squaring, while x**|y| is a
    normal float): about |y|/2."""
    rng = np.random.default_rng(RNG_SEED)
    x, y = rng.uniform(0, 20, 200_000).astype(np.float32), rng.uniform(-30, 30, 200_000).astype(np.float32)
    error = ulp_error(host("pow", x, y), _pow_reference(x, y))
    assert np.all(error <= 3 + 2 * np.abs(y * np.log(x.astype(np.float64))))
    x, y = rng.uniform(-20, 20, 100_000).astype(np.float32), rng.integers(-31, 32, 100_000).astype(np.float32)
    error = ulp_error(host("pow", x, y), _pow_reference(x, y))
    with np.errstate(over="ignore", divide="ignore"):
        squared = np.abs(_pow_reference(x, np.abs(y))).astype(np.float32)    # x**|y| by squaring must be normal
        log_term = np.abs(y * np.log(np.abs(x.astype(np.float64))))
    by_squaring = (squared >= np.finfo(np.float32).tiny) & np.isfinite(squared)
    assert np.all(error <= np.where(by_squaring, 1 + np.abs(y), 3 + 2 * log_term))


def test_pow_special_values(host: HostMath) -> None:
    """C99 / NumPy special cases, every pair of special values (the reference is float64, rounded)."""
    values = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, np.inf, -np.inf, np.nan],
                      dtype=np.float32)
    x, y = (a.ravel() for a in np.meshgrid(values, values))
    expected = _pow_reference(x, y).astype(np.float32)
    got = host("pow", x, y)
    np.testing.assert_array_equal(got, expected)
    numbers = ~np.isnan(expected)
    np.testing.assert_array_equal(np.signbit(got[numbers]), np.signbit(expected[numbers]))


def test_max_min_propagate_nan(host: HostMath) -> None:
    x, y = np.meshgrid(SPECIAL, SPECIAL)
    x, y = x.ravel(), y.ravel()
    np.testing.assert_array_equal(host("max", x, y), np.maximum(x, y))
    np.testing.assert_array_equal(host("min", x, y), np.minimum(x, y))


def test_each_function_defined_once_as_internal() -> None:
    module = ir.Module(name="once")
    math_lib = MathLib(module, resolve_target())
    function = ir.Function(module, ir.FunctionType(F32, [F32]), name="twice")
    b = ir.IRBuilder(function.append_basic_block("entry"))
    b.ret(b.fadd(math_lib.tanh(b, function.args[0]), math_lib.tanh(b, math_lib.exp(b, function.args[0]))))
    text = str(module)
    assert text.count('define internal float @"pegasus_tanhf"') == 1
    assert text.count('define internal float @"pegasus_expf"') == 1
    assert all(f.linkage == "internal" and "nounwind" in f.attributes
               for f in module.functions if f.name.startswith("pegasus_"))


# ---- cross-compiled objects -------------------------------------------------------------------------

LIBM = {
    f"{name}{suffix}" for suffix in ("", "f")
    for name in ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "pow", "sqrt", "floor", "ceil", "trunc",
                 "round", "rint", "nearbyint", "roundeven", "fmin", "fmax", "fminimum", "fmaximum", "fma", "fabs",
                 "copysign", "tanh", "erf", "erfc", "sin", "cos", "tan", "atan", "ldexp", "frexp", "modf", "fmod")
}
TARGETS = [("arm", "cortex-m0", None), ("arm", "cortex-m4", None), ("arm", "cortex-m7", None),
           ("arm", "cortex-m33", None), ("arm", "cortex-m4", "soft"), ("aarch64", "cortex-a53", None),
           ("x86_64", None, None), ("i386", None, None)]


@pytest.mark.parametrize(("arch", "mcpu", "float_abi"), TARGETS, ids=lambda v: str(v))
def test_objects_need_no_libm(arch: str, mcpu: str | None, float_abi: str | None) -> None:
    """Every function compiled for the target leaves at most compiler-runtime helpers undefined
    (``__aeabi_fmul``, ... on soft-float ARM; nothing on hard-float targets)."""
    target = resolve_target(arch, mcpu, float_abi)
    module = ir.Module(name="mathlib_target")
    module.triple = target.triple
    _build(module, target)
    missing = undefined_symbols(compile_object(module, target))
    if arch == "i386":  # position-independent i386 code names the GOT base, which every linker defines
        missing.discard("_GLOBAL_OFFSET_TABLE_")
    assert not missing & LIBM
    assert all(name.startswith("__") for name in missing), sorted(missing)
    if target.float_abi == "hard" or not target.is_cortex_m:
        assert not missing, sorted(missing)
