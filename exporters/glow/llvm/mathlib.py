"""Scalar float32 math compiled into the bundle itself, so a bundle never calls libm.

A bare Cortex-M target has no libm, and LLVM quietly turns several intrinsics into libm calls: on
cortex-m0 (soft float) ``llvm.sqrt``/``floor``/``minnum``/``fma`` become sqrtf/floorf/fminf/fmaf; on
cortex-m4 (FPv4) and on plain x86-64/i386 ``llvm.floor``/``ceil``/``trunc``/``rint`` become
floorf/ceilf/... and ``llvm.minnum``/``maxnum`` fminf/fmaxf on cortex-m4 and i386 (all checked with
llvmlite 0.50). So this library uses only ``llvm.fabs``, ``llvm.copysign`` and (on FPU targets)
``llvm.sqrt``, which every target expands inline; rounding goes through float ↔ int conversions.

Each non-trivial function is defined once per module, on first use, as an internal nounwind function
``pegasus_<name>f`` (``pegasus_expf``); kernels call it and LLVM inlines it, so loops still vectorise.
Functions are branch-free (selects), and NaN, infinities, zeros and subnormals follow C99/NumPy.

Methods take an IRBuilder and float values and return a float value: ``math.exp(b, x)``.
Accuracy (float32, measured by tests/exporters/test_mathlib.py against float64 references, and the same
on Cortex-M0/M4/M7/M33 and AArch64 under QEMU): exp, expm1, log, log1p, tanh, sigmoid, softplus, erf,
atan, sin, cos within 3 ulp and tan within 5 (relative error < 1e-6; sin/cos/tan reduce any finite
argument exactly); sqrt is correctly rounded (also the integer-only version for soft-float targets);
floor, ceil, trunc and round_half_even are exact. pow(x, y) is exact-ish for y = ½ (sqrt) and within
|y|/2 + 1 ulp for integer |y| < 32 while |x|**|y| is a normal float (squaring); otherwise it is
exp(y·log|x|), within about 2·|y·ln x| ulp (≤ 1e-5 relative before overflow).

The polynomial coefficients are near-minimax fits (Lawson's iteratively reweighted least squares in
float64, rounded to float32) of the named function on the reduced interval given beside them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from llvmlite import ir

from pegasus.exporters.glow.llvm.loops import for_range

F32, I32 = ir.FloatType(), ir.IntType(32)
CONTRACT = ("contract",)     # lets LLVM fuse a polynomial's multiply-add where the target has FMA
Body = Callable[..., ir.Value]

# exp(r) = 1 + r + r²·P(r) on [-ln2/2, ln2/2]
EXP_POLY = (0.5, 0.16666665673, 0.041666295379, 0.0083334967494, 0.0013944648672, 0.00019790352962)
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4     # ln 2 = HI + LO, HI with 9 bits so n·HI is exact
EXP_LO, EXP_HI = -104.0, 89.0                    # exp underflows to 0 below, overflows to inf above
# log(1+f) = f - f²/2 + f³·P(f) on [√½-1, √2-1]
LOG_POLY = (0.33333313465, -0.25000008941, 0.20002119243, -0.16667996347, 0.14219552279, -0.12405588478,
            0.11888165027, -0.11675657332, 0.067466415465)
# tanh(x) = x + x³·P(x²) on |x| < 0.625
TANH_POLY = (-0.33333280683, 0.13331441581, -0.053739715368, 0.020639084280, -0.0057049840689)
TANH_SMALL = 0.625
# erf(x) = x·P(x²) on |x| < 1;  erf(x) = 1 - exp(-x²)·Q(x) on [1, 3.92] (erf(x) rounds to 1 beyond)
ERF_SMALL_POLY = (1.1283791065, -0.37612625957, 0.11283600330, -0.026854444295, 0.0051895356737,
                  -0.00080208422150, 0.000078891229350)
ERF_LARGE_POLY = (0.98612725735, -1.0482106209, 0.79259490967, -0.43167975545, 0.16413375735,
                  -0.040998216718, 0.0060051358305, -0.00038888497511)
ERF_SATURATE = 3.92
# sin(r) = r + r³·S(r²), cos(r) = 1 - r²/2 + r⁴·C(r²) on |r| ≤ π/4
SIN_POLY = (-0.16666655242, 0.0083321603015, -0.00019515282474)
COS_POLY = (0.041666645557, -0.0013887316454, 0.000024433156796)
TWO_OVER_PI_BITS = 0xA2F9836E4E441529FC2757D1F534DDC0DB6295993C439041FE5163ABDEBBC561   # ⌊2/π·2**256⌋
TRIG_ROWS = range(15, 32)       # biased exponent // 8 of every |x| > π/4
# atan(t) = t + t³·P(t²) on |t| ≤ tan(π/8)
ATAN_POLY = (-0.33332949877, 0.19977709651, -0.13877677917, 0.080537192523)
TAN_PI_8, TAN_3PI_8 = 0.41421356237, 2.41421356237


def fconst(value: float) -> ir.Constant:
    return ir.Constant(F32, float(value))


def iconst(value: int) -> ir.Constant:
    return ir.Constant(I32, int(value))


def intrinsic(module: ir.Module, name: str, arity: int) -> ir.Function:
    """A float32 LLVM intrinsic (``llvm.fabs.f32``), declared once per module."""
    existing = module.globals.get(name)
    return existing if existing is not None else ir.Function(module, ir.FunctionType(F32, [F32] * arity), name)


def has_hardware_sqrt(triple: str) -> bool:
    """True where ``llvm.sqrt.f32`` becomes an instruction: every hard-float target (ARM ``eabihf``,
    AArch64, x86 SSE/x87); soft-float ARM would call sqrtf."""
    return not triple.startswith(("thumb", "arm")) or triple.endswith("eabihf")


# ---- scalar helpers (emit inline) -----------------------------------------------------------------


def poly(b: ir.IRBuilder, x: ir.Value, coeffs: Sequence[float]) -> ir.Value:
    """c0 + c1·x + c2·x² + ... by Horner's rule."""
    acc: ir.Value = fconst(coeffs[-1])
    for coeff in reversed(coeffs[:-1]):
        acc = b.fadd(b.fmul(acc, x, flags=CONTRACT), fconst(coeff), flags=CONTRACT)
    return acc


def fabs(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return b.call(intrinsic(b.module, "llvm.fabs.f32", 1), [x])


def copysign(b: ir.IRBuilder, magnitude: ir.Value, sign: ir.Value) -> ir.Value:
    return b.call(intrinsic(b.module, "llvm.copysign.f32", 2), [magnitude, sign])


def is_nan(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return b.fcmp_unordered("uno", x, x)


def nan_passes(b: ir.IRBuilder, x: ir.Value, result: ir.Value) -> ir.Value:
    """``result``, or x itself when x is NaN."""
    return b.select(is_nan(b, x), x, result)


def clamp(b: ir.IRBuilder, x: ir.Value, low: float, high: float) -> ir.Value:
    """x limited to [low, high]; NaN gives ``low`` (so the integer conversions that follow are defined)."""
    above = b.select(b.fcmp_ordered(">", x, fconst(high)), fconst(high), x)
    return b.select(b.fcmp_unordered("<", above, fconst(low)), fconst(low), above)


def round_to_int(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Nearest i32 (halves away from zero); x must be finite and well inside the i32 range."""
    return b.fptosi(b.fadd(x, copysign(b, fconst(0.5), x)), I32)


def pow2(b: ir.IRBuilder, n: ir.Value) -> ir.Value:
    """2**n as a float for n in [-126, 127], built from its bits."""
    return b.bitcast(b.shl(b.add(n, iconst(127)), iconst(23)), F32)


def scale2(b: ir.IRBuilder, value: ir.Value, n: ir.Value) -> ir.Value:
    """value·2**n for n in [-252, 254] in two exact steps (ldexp), so results may overflow to inf or
    round once into the subnormal range."""
    half = b.ashr(n, iconst(1))
    return b.fmul(b.fmul(value, pow2(b, half)), pow2(b, b.sub(n, half)))


def whole_part(b: ir.IRBuilder, x: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(t, i, small): t = trunc(x) as float and i as i32 while |x| < 2**23; ``small`` says whether
    x had a fraction to drop at all (false for large, infinite and NaN x, which are their own result)."""
    small = b.fcmp_ordered("<", fabs(b, x), fconst(2.0 ** 23))
    whole = b.fptosi(b.select(small, x, fconst(0.0)), I32)
    return b.sitofp(whole, F32), whole, small


def sign_of_x(b: ir.IRBuilder, x: ir.Value, small: ir.Value, value: ir.Value) -> ir.Value:
    """A rounding result: ``value`` carrying x's sign (so -0.4 → -0.0), or x when it had no fraction."""
    return b.select(small, copysign(b, value, x), x)


def two_over_pi_words(row: int) -> tuple[int, int, int]:
    """The 96 bits of 2/π that matter for |x| = M·2**(8·row - 150) (M < 2**31 an integer): those of
    weight 2**1 down to 2**-94 once 2/π is scaled by 2**(8·row - 150), as three 32-bit words. Bits above
    2**1 only add multiples of 4 (whole turns) to x·2/π; bits below 2**-94 are too small to matter."""
    last = 8 * row - 151 + 95        # index (1 = 2**-1) of 2/π's last bit in the window
    window = (TWO_OVER_PI_BITS >> (256 - last)) & ((1 << 96) - 1)
    return window >> 64, (window >> 32) & 0xFFFFFFFF, window & 0xFFFFFFFF


class MathLib:
    """The bundle's float32 math functions, each defined in ``module`` on first use."""

    def __init__(self, module: ir.Module, target) -> None:
        self.module = module
        self.target = target
        self.hardware_sqrt = has_hardware_sqrt(target.triple)

    def _call(self, b: ir.IRBuilder, name: str, body: Body, *args: ir.Value) -> ir.Value:
        return b.call(self._define(name, body, len(args)), list(args))

    def _define(self, name: str, body: Body, arity: int) -> ir.Function:
        symbol = f"pegasus_{name}f"
        existing = self.module.globals.get(symbol)
        if existing is not None:
            return existing
        function = ir.Function(self.module, ir.FunctionType(F32, [F32] * arity), name=symbol)
        function.linkage = "internal"
        function.attributes.add("nounwind")
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        builder.ret(body(builder, *function.args))
        return function

    # ---- trivial: emitted inline ------------------------------------------------------------------

    def abs(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return fabs(b, x)

    def max(self, b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
        """The larger of x and y; NaN if either is NaN (like NumPy's maximum)."""
        return nan_passes(b, y, b.select(b.fcmp_unordered(">", x, y), x, y))

    def min(self, b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
        return nan_passes(b, y, b.select(b.fcmp_unordered("<", x, y), x, y))

    def copysign(self, b: ir.IRBuilder, magnitude: ir.Value, sign: ir.Value) -> ir.Value:
        return copysign(b, magnitude, sign)

    # ---- exponentials and logarithms ----------------------------------------------------------------

    def exp(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return self._call(b, "exp", self._exp, x)

    def expm1(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return self._call(b, "expm1", self._expm1, x)

    def log(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return self._call(b, "log", self._log, x)

    def log1p(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return self._call(b, "log1p", self._log1p, x)

    def pow(self, b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
        return self._call(b, "pow", self._pow, x, y)

    @staticmethod
    def _exp_reduced(b: ir.IRBuilder, x: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(q, n) with exp(x) = (1 + q)·2**n: Cody–Waite reduction x = n·ln2 + r, |r| ≤ ln2/2, and
        q = exp(r) - 1 by polynomial. x is clamped to where exp is finite and non-zero (NaN → low end)."""
        x = clamp(b, x, EXP_LO, EXP_HI)
        n = round_to_int(b, b.fmul(x, fconst(1 / math.log(2))))
        whole = b.sitofp(n, F32)
        r = b.fsub(b.fsub(x, b.fmul(whole, fconst(LN2_HI))), b.fmul(whole, fconst(LN2_LO)))
        q = b.fadd(r, b.fmul(b.fmul(r, r), poly(b, r, EXP_POLY), flags=CONTRACT), flags=CONTRACT)
        return q, n

    def _exp(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        q, n = self._exp_reduced(b, x)
        return nan_passes(b, x, scale2(b, b.fadd(q, fconst(1.0)), n))

    def _expm1(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """2**n·q + (2**n - 1): exact scaling and one rounding, so small results keep their precision;
        beyond n = 24 the -1 no longer matters and exp's own scaling (which may overflow) is used."""
        q, n = self._exp_reduced(b, x)
        low = b.select(b.icmp_signed("<", n, iconst(-126)), iconst(-126), n)
        scale = pow2(b, b.select(b.icmp_signed(">", low, iconst(24)), iconst(24), low))
        near = b.fadd(b.fmul(scale, q), b.fsub(scale, fconst(1.0)))
        far = b.fsub(scale2(b, b.fadd(q, fconst(1.0)), n), fconst(1.0))
        result = b.select(b.icmp_signed(">", n, iconst(24)), far, near)
        return b.select(b.fcmp_unordered("==", x, fconst(0.0)), x, result)     # NaN and ±0 are their own result

    def _log(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """x = 2**e·m with m in [√½, √2) (subnormals scaled up first), f = m - 1 exactly, and
        log x = f - f²/2 + f³·P(f) + e·ln2 summed smallest first."""
        bits = b.bitcast(x, I32)
        subnormal = b.icmp_unsigned("<", bits, iconst(0x00800000))
        scaled = b.bitcast(b.select(subnormal, b.fmul(x, fconst(2.0 ** 25)), x), I32)
        shifted = b.add(scaled, iconst(0x3F800000 - 0x3F3504F3))   # moves m's range from [1, 2) to [√½, √2)
        exponent = b.sub(b.sub(b.lshr(shifted, iconst(23)), iconst(127)), b.select(subnormal, iconst(25), iconst(0)))
        m = b.bitcast(b.add(b.and_(shifted, iconst(0x007FFFFF)), iconst(0x3F3504F3)), F32)
        f = b.fsub(m, fconst(1.0))
        e = b.sitofp(exponent, F32)
        f2 = b.fmul(f, f)
        tail = b.fmul(b.fmul(f2, f), poly(b, f, LOG_POLY), flags=CONTRACT)
        tail = b.fsub(b.fadd(tail, b.fmul(e, fconst(LN2_LO))), b.fmul(f2, fconst(0.5)), flags=CONTRACT)
        result = b.fadd(b.fadd(f, tail), b.fmul(e, fconst(LN2_HI)))
        return self._log_special(b, x, bits, result)

    @staticmethod
    def _log_special(b: ir.IRBuilder, x: ir.Value, bits: ir.Value, result: ir.Value) -> ir.Value:
        """log(±0) = -inf, log(negative) = NaN, log(+inf) = +inf, NaN stays NaN (tested on the bits)."""
        magnitude = b.and_(bits, iconst(0x7FFFFFFF))
        negative = b.and_(b.icmp_signed("<", bits, iconst(0)), b.icmp_unsigned("<=", magnitude, iconst(0x7F800000)))
        result = b.select(b.icmp_unsigned(">=", bits, iconst(0x7F800000)), x, result)   # +inf, NaN, negatives
        result = b.select(negative, fconst(math.nan), result)
        return b.select(b.icmp_unsigned("==", magnitude, iconst(0)), fconst(-math.inf), result)

    def _log1p(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """log(1 + x) without losing small x: log(w)·x / (w - 1) with w = 1 + x (Goldberg's trick)."""
        w = b.fadd(x, fconst(1.0))
        ratio = b.fmul(self.log(b, w), b.fdiv(x, b.fsub(w, fconst(1.0))))
        result = b.select(b.fcmp_ordered("==", w, fconst(1.0)), x, ratio)
        return b.select(b.fcmp_ordered("==", w, fconst(math.inf)), w, result)

    def _pow(self, b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
        """x**y: by squaring for integer |y| < 32, sqrt(x) for y = ½ and x > 0, otherwise exp(y·log|x|);
        C99's special cases: x**0 = 1, 1**y = 1, (-1)**±inf = 1, negative x only to integer powers (odd
        ones negative, others NaN), signed zeros and infinities."""
        magnitude = fabs(b, x)
        result = self.exp(b, b.fmul(y, self.log(b, magnitude)))
        integral, odd = self._integer_kind(b, y)
        negative = b.icmp_signed("<", b.bitcast(x, I32), iconst(0))
        result = b.select(b.and_(negative, odd), b.fneg(result), result)
        finite_negative = b.and_(b.fcmp_ordered("<", x, fconst(0.0)), b.fcmp_ordered(">", x, fconst(-math.inf)))
        result = b.select(b.and_(finite_negative, b.not_(integral)), fconst(math.nan), result)
        unit_to_inf = b.and_(b.fcmp_ordered("==", magnitude, fconst(1.0)),
                             b.fcmp_ordered("==", fabs(b, y), fconst(math.inf)))
        one = b.or_(b.or_(unit_to_inf, b.fcmp_ordered("==", x, fconst(1.0))), b.fcmp_ordered("==", y, fconst(0.0)))
        power, usable = self._small_integer_power(b, x, y, integral)
        result = b.select(usable, power, result)
        root = b.and_(b.fcmp_ordered("==", y, fconst(0.5)), b.fcmp_ordered(">", x, fconst(0.0)))
        result = b.select(root, self.sqrt(b, b.select(root, x, fconst(1.0))), result)
        return b.select(one, fconst(1.0), result)

    @staticmethod
    def _small_integer_power(b: ir.IRBuilder, x: ir.Value, y: ir.Value, integral: ir.Value
                             ) -> tuple[ir.Value, ir.Value]:
        """(x**|y| by squaring, or its reciprocal for y < 0; whether to use it): y an integer with
        |y| < 32 and x**|y| a normal number (zeros, infinities, NaN and subnormals go the general way)."""
        exponent = b.fptosi(b.select(integral, clamp(b, y, -32.0, 32.0), fconst(0.0)), I32)
        count = b.select(b.icmp_signed("<", exponent, iconst(0)), b.sub(iconst(0), exponent), exponent)
        power, square = fconst(1.0), x
        for bit in range(5):
            chosen = b.trunc(b.lshr(count, iconst(bit)), ir.IntType(1))
            power = b.select(chosen, b.fmul(power, square), power)
            square = b.fmul(square, square) if bit < 4 else square
        size = fabs(b, power)
        normal = b.and_(b.fcmp_ordered(">=", size, fconst(2.0 ** -126)), b.fcmp_ordered("<", size, fconst(math.inf)))
        usable = b.and_(b.and_(integral, b.icmp_signed("<", count, iconst(32))), normal)
        return b.select(b.fcmp_ordered("<", y, fconst(0.0)), b.fdiv(fconst(1.0), power), power), usable

    @staticmethod
    def _integer_kind(b: ir.IRBuilder, y: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(y is an integer (infinities count as even ones), y is an odd integer)."""
        whole, as_int, small = whole_part(b, y)
        integral = b.or_(b.fcmp_ordered("==", whole, y), b.and_(b.not_(small), b.not_(is_nan(b, y))))
        odd_bit = b.trunc(as_int, ir.IntType(1))
        return integral, b.and_(b.and_(small, b.fcmp_ordered("==", whole, y)), odd_bit)

    # ---- activations ----------------------------------------------------------------------------------

    def tanh(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return self._call(b, "tanh", self._tanh, x)

    def sigmoid(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return self._call(b, "sigmoid", self._sigmoid, x)

    def softplus(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return self._call(b, "softplus", self._softplus, x)

    def erf(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return self._call(b, "erf", self._erf, x)

    def _tanh(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """tanh|x| = |x| + |x|³·P(x²) near 0, else 1 - 2 / (exp(2|x|) + 1), which saturates to 1 (exp
        → inf); x's sign is put back last (so tanh(-0) = -0)."""
        magnitude = fabs(b, x)
        square = b.fmul(x, x)
        near = b.fadd(magnitude, b.fmul(b.fmul(magnitude, square), poly(b, square, TANH_POLY), flags=CONTRACT))
        grown = self.exp(b, b.fadd(magnitude, magnitude))
        far = b.fsub(fconst(1.0), b.fdiv(fconst(2.0), b.fadd(grown, fconst(1.0))))
        return copysign(b, b.select(b.fcmp_ordered("<", magnitude, fconst(TANH_SMALL)), near, far), x)

    def _sigmoid(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """1 / (1 + e) for x ≥ 0 and e / (1 + e) below, with e = exp(-|x|): never overflows, and keeps
        full relative precision down to the subnormal results of very negative x."""
        small = self.exp(b, b.fneg(fabs(b, x)))
        upper = b.fdiv(fconst(1.0), b.fadd(small, fconst(1.0)))
        return b.select(b.fcmp_ordered(">=", x, fconst(0.0)), upper, b.fmul(small, upper))

    def _softplus(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), which cannot overflow."""
        return b.fadd(self.max(b, x, fconst(0.0)), self.log1p(b, self.exp(b, b.fneg(fabs(b, x)))))

    def _erf(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """x·P(x²) for |x| < 1, else ±(1 - exp(-x²)·Q(|x|)) with |x| clamped to 3.92 (where erf is 1
        in float32); NaN flows through the second form."""
        magnitude = fabs(b, x)
        near = b.fmul(x, poly(b, b.fmul(x, x), ERF_SMALL_POLY))
        clipped = b.select(b.fcmp_ordered(">", magnitude, fconst(ERF_SATURATE)), fconst(ERF_SATURATE), magnitude)
        decay = self.exp(b, b.fneg(b.fmul(clipped, clipped)))
        far = b.fsub(fconst(1.0), b.fmul(decay, poly(b, clipped, ERF_LARGE_POLY)))
        return b.select(b.fcmp_ordered("<", magnitude, fconst(1.0)), near, copysign(b, far, x))

    # ---- square roots ---------------------------------------------------------------------------------

    def sqrt(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        if self.hardware_sqrt:
            return b.call(intrinsic(self.module, "llvm.sqrt.f32", 1), [x])
        return self._call(b, "sqrt", self._soft_sqrt, x)

    def rsqrt(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return self._call(b, "rsqrt", lambda inner, v: inner.fdiv(fconst(1.0), self.sqrt(inner, v)), x)

    def _soft_sqrt(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """Correctly rounded sqrt with integer operations only (for soft-float targets): x = M·2**(2k-24)
        with M in [2**24, 2**26), the 25-bit root of M·2**24 found bit by bit, then rounded to nearest
        (a tie is impossible)."""
        bits = b.bitcast(x, I32)
        subnormal = b.icmp_unsigned("<", bits, iconst(0x00800000))
        scaled = b.bitcast(b.select(subnormal, b.fmul(x, fconst(2.0 ** 24)), x), I32)
        exponent = b.sub(b.sub(b.lshr(scaled, iconst(23)), iconst(127)), b.select(subnormal, iconst(24), iconst(0)))
        mantissa = b.or_(b.and_(scaled, iconst(0x007FFFFF)), iconst(0x00800000))
        root = self._integer_root(b, b.shl(mantissa, b.add(b.and_(exponent, iconst(1)), iconst(1))))
        rounded = b.add(b.lshr(root, iconst(1)), b.and_(root, iconst(1)))
        half = b.ashr(exponent, iconst(1))
        result = b.bitcast(b.add(rounded, b.shl(b.add(half, iconst(126)), iconst(23))), F32)
        return self._sqrt_special(b, x, bits, result)

    @staticmethod
    def _integer_root(b: ir.IRBuilder, radicand: ir.Value) -> ir.Value:
        """floor(sqrt(radicand·2**24)) for radicand < 2**26, one result bit per step (the remainder is
        doubled each step instead of shifting the radicand, so 32 bits suffice)."""
        slots = [b.alloca(I32) for _ in range(3)]
        for slot, initial in zip(slots, (radicand, iconst(0), iconst(0))):
            b.store(initial, slot)
        with for_range(b, 25, name="bit") as step:
            rest, twice, root = (b.load(slot) for slot in slots)
            digit = b.lshr(iconst(1 << 24), step)
            trial = b.add(twice, digit)
            fits = b.icmp_unsigned("<=", trial, rest)
            rest = b.select(fits, b.sub(rest, trial), rest)
            b.store(b.shl(rest, iconst(1)), slots[0])
            b.store(b.select(fits, b.add(trial, digit), twice), slots[1])
            b.store(b.select(fits, b.add(root, digit), root), slots[2])
        return b.load(slots[2])

    @staticmethod
    def _sqrt_special(b: ir.IRBuilder, x: ir.Value, bits: ir.Value, result: ir.Value) -> ir.Value:
        """sqrt(±0) = ±0, sqrt(+inf) = +inf, NaN stays, negative (incl. -inf) gives NaN."""
        magnitude = b.and_(bits, iconst(0x7FFFFFFF))
        passthrough = b.or_(b.icmp_unsigned("==", magnitude, iconst(0)),
                            b.icmp_unsigned(">=", magnitude, iconst(0x7F800000)))
        result = b.select(passthrough, x, result)
        negative = b.and_(b.icmp_signed("<", bits, iconst(0)), b.icmp_unsigned("<=", magnitude, iconst(0x7F800000)))
        return b.select(b.and_(negative, b.icmp_unsigned("!=", magnitude, iconst(0))), fconst(math.nan), result)

    # ---- rounding -------------------------------------------------------------------------------------

    def floor(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return self._call(b, "floor", self._floor, x)

    def ceil(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return self._call(b, "ceil", self._ceil, x)

    def trunc(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return self._call(b, "trunc", self._trunc, x)

    def round_half_even(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return self._call(b, "roundeven", self._round_half_even, x)

    @staticmethod
    def _floor(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        whole, _, small = whole_part(b, x)
        below = b.fsub(whole, b.select(b.fcmp_ordered(">", whole, x), fconst(1.0), fconst(0.0)))
        return sign_of_x(b, x, small, below)

    @staticmethod
    def _ceil(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        whole, _, small = whole_part(b, x)
        above = b.fadd(whole, b.select(b.fcmp_ordered("<", whole, x), fconst(1.0), fconst(0.0)))
        return sign_of_x(b, x, small, above)

    @staticmethod
    def _trunc(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        whole, _, small = whole_part(b, x)
        return sign_of_x(b, x, small, whole)

    @staticmethod
    def _round_half_even(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """trunc(x), moved one away from zero when the dropped fraction (exact) is over ½, or is ½ and
        the truncated value odd."""
        whole, as_int, small = whole_part(b, x)
        fraction = fabs(b, b.fsub(x, whole))
        odd = b.trunc(as_int, ir.IntType(1))
        tie_to_odd = b.and_(b.fcmp_ordered("==", fraction, fconst(0.5)), odd)
        away = b.or_(b.fcmp_ordered(">", fraction, fconst(0.5)), tie_to_odd)
        step = b.select(away, copysign(b, fconst(1.0), x), fconst(0.0))
        return sign_of_x(b, x, small, b.fadd(whole, step))

    # ---- trigonometry ---------------------------------------------------------------------------------

    def sin(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return self._call(b, "sin", lambda inner, v: self._trig(inner, v, "sin"), x)

    def cos(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return self._call(b, "cos", lambda inner, v: self._trig(inner, v, "cos"), x)

    def tan(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return self._call(b, "tan", lambda inner, v: self._trig(inner, v, "tan"), x)

    def atan(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return self._call(b, "atan", self._atan, x)

    def _trig(self, b: ir.IRBuilder, x: ir.Value, which: str) -> ir.Value:
        """x = j·π/2 + r with |r| ≤ π/4, sin r and cos r by polynomial, picked and signed by the quadrant
        j mod 4; NaN for ±inf and NaN."""
        quadrant, r = self._reduce(b, x)
        inside = b.fcmp_ordered("<=", fabs(b, x), fconst(math.pi / 4))
        quadrant, r = b.select(inside, iconst(0), quadrant), b.select(inside, x, r)
        z = b.fmul(r, r)
        sin_r = copysign(b, b.fadd(r, b.fmul(b.fmul(r, z), poly(b, z, SIN_POLY), flags=CONTRACT)), r)  # sin(-0) = -0
        cos_r = b.fadd(fconst(1.0), b.fsub(b.fmul(b.fmul(z, z), poly(b, z, COS_POLY), flags=CONTRACT),
                                           b.fmul(z, fconst(0.5))))
        odd = b.trunc(quadrant, ir.IntType(1))
        if which == "tan":     # tan = sin r / cos r, or -cos r / sin r in odd quadrants
            value = b.fdiv(b.select(odd, cos_r, sin_r), b.select(odd, b.fneg(sin_r), cos_r))
        else:                  # sin: s, c, -s, -c and cos: c, -s, -c, s over the quadrants 0..3
            picked = b.select(odd, cos_r, sin_r) if which == "sin" else b.select(odd, b.fneg(sin_r), cos_r)
            negate = b.trunc(b.lshr(quadrant, iconst(1)), ir.IntType(1))
            value = b.select(negate, b.fneg(picked), picked)
        finite = b.fcmp_ordered("<", fabs(b, x), fconst(math.inf))
        return b.select(finite, value, fconst(math.nan))

    def _reduce(self, b: ir.IRBuilder, x: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(j, r) for any finite |x| > π/4, as if computed exactly (Payne–Hanek style): with
        |x| = M·2**(8·row - 150), x·2/π mod 4 = M·(96 bits of 2/π) mod 4 as a 2.62 fixed-point number in
        64-bit integers, rounded to the nearest quadrant j; the remainder times π/2 is r."""
        i64 = ir.IntType(64)
        bits = b.bitcast(x, I32)
        biased = b.lshr(b.and_(bits, iconst(0x7FFFFFFF)), iconst(23))
        biased = b.select(b.icmp_unsigned("<", biased, iconst(8 * TRIG_ROWS[0])), iconst(8 * TRIG_ROWS[0]), biased)
        mantissa = b.zext(b.or_(b.and_(bits, iconst(0x007FFFFF)), iconst(0x00800000)), i64)
        mantissa = b.shl(mantissa, b.zext(b.and_(biased, iconst(7)), i64))
        row = b.mul(b.sub(b.lshr(biased, iconst(3)), iconst(TRIG_ROWS[0])), iconst(3))
        table = self._two_over_pi_table()
        words = [b.zext(b.load(b.gep(table, [iconst(0), b.add(row, iconst(k))], inbounds=True)), i64)
                 for k in range(3)]
        shift32 = ir.Constant(i64, 32)
        fixed = b.add(b.add(b.shl(b.mul(mantissa, words[0]), shift32), b.mul(mantissa, words[1])),
                      b.lshr(b.mul(mantissa, words[2]), shift32))
        quadrant = b.lshr(b.add(fixed, ir.Constant(i64, 1 << 61)), ir.Constant(i64, 62))
        remainder = b.sub(fixed, b.shl(quadrant, ir.Constant(i64, 62)))        # in [-2**61, 2**61)
        negative_rem = b.icmp_signed("<", remainder, ir.Constant(i64, 0))
        size = b.select(negative_rem, b.sub(ir.Constant(i64, 0), remainder), remainder)
        high = b.uitofp(b.trunc(b.lshr(size, shift32), I32), F32)
        low = b.uitofp(b.trunc(size, I32), F32)
        r = b.fmul(b.fadd(b.fmul(high, fconst(2.0 ** 32)), low), fconst(math.pi / 2 * 2.0 ** -62))
        r = b.select(negative_rem, b.fneg(r), r)
        quadrant = b.trunc(quadrant, I32)
        negative_x = b.icmp_signed("<", bits, iconst(0))      # x = -(j·π/2 + r) = (-j)·π/2 + (-r)
        return b.select(negative_x, b.sub(iconst(0), quadrant), quadrant), b.select(negative_x, b.fneg(r), r)

    def _two_over_pi_table(self) -> ir.GlobalVariable:
        """The words of ``two_over_pi_words`` for every row, as one read-only array in the module."""
        name = "pegasus_two_over_pi"
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing
        words = [word for row in TRIG_ROWS for word in two_over_pi_words(row)]
        kind = ir.ArrayType(I32, len(words))
        table = ir.GlobalVariable(self.module, kind, name=name)
        table.initializer = ir.Constant(kind, [iconst(word) for word in words])
        table.global_constant = True
        table.linkage = "internal"
        return table

    @staticmethod
    def _atan(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """atan|x| = offset + atan(t) with t = |x|, (|x|-1)/(|x|+1) or -1/|x| so |t| ≤ tan(π/8); signed."""
        magnitude = fabs(b, x)
        big = b.fcmp_ordered(">", magnitude, fconst(TAN_3PI_8))
        mid = b.fcmp_ordered(">", magnitude, fconst(TAN_PI_8))
        numerator = b.select(big, fconst(-1.0), b.select(mid, b.fsub(magnitude, fconst(1.0)), magnitude))
        denominator = b.select(big, magnitude, b.select(mid, b.fadd(magnitude, fconst(1.0)), fconst(1.0)))
        t = b.fdiv(numerator, denominator)
        offset = b.select(big, fconst(math.pi / 2), b.select(mid, fconst(math.pi / 4), fconst(0.0)))
        z = b.fmul(t, t)
        angle = b.fadd(t, b.fmul(b.fmul(t, z), poly(b, z, ATAN_POLY), flags=CONTRACT))
        return copysign(b, b.fadd(offset, angle), x)
