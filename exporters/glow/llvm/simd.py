"""The target's vector registers (``Simd``, ``simd_of``: how wide, how many, so a kernel can size its register
tile) and vector-level helpers every SIMD kernel uses: ``vconst``, ``masked_intrinsic`` (masked loads and stores),
``prefetch_span``."""

from __future__ import annotations

from dataclasses import dataclass

import llvmlite.binding as llvm
from llvmlite import ir

from pegasus.exporters.glow.llvm.loops import affine, const
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.exporters.glow.llvm.types import BIT, I32, Value


@dataclass(frozen=True)
class Simd:
    """Vector registers of the target: ``width`` bytes each (4 = a scalar FPU), ``registers`` of them."""

    width: int
    registers: int

    def lanes(self, element: ir.Type) -> int:
        return max(1, self.width // element_bytes(element))

    @property
    def accumulators(self) -> int:
        """Registers a kernel may keep accumulators in, leaving room for operands."""
        return self.registers - 4 if self.registers <= 16 else self.registers // 2


def element_bytes(element: ir.Type) -> int:
    return {ir.HalfType: 2, ir.FloatType: 4, ir.DoubleType: 8}.get(type(element), 0) or element.width // 8


def _x86_simd(cpu: str, features: str, registers: int) -> Simd:
    if cpu in ("i686", "i386"):
        return Simd(4, 8)      # x87: no vector registers
    if cpu == llvm.get_host_cpu_name():
        host = llvm.get_host_cpu_features()
        flags = {name for name, on in host.items() if on}
    else:
        flags = {f[1:] for f in features.split(",") if f.startswith("+")}
        flags |= {"x86-64-v3": {"avx"}, "x86-64-v4": {"avx", "avx512f"}}.get(cpu, set())
    if "avx512f" in flags:
        return Simd(64, min(registers * 2, 32))
    return Simd(32, registers) if "avx" in flags else Simd(16, registers)


def simd_of(target) -> Simd:
    """Register file a kernel should tile for (exporters.glow.target.Target)."""
    if target.arch in ("x86_64", "i386"):
        return _x86_simd(target.cpu, target.features, 16 if target.arch == "x86_64" else 8)
    if target.arch == "aarch64":
        return Simd(16, 32)
    if target.cpu == "cortex-m55" and target.float_abi == "hard":
        return Simd(16, 8)       # Helium (MVE): 8 Q registers
    return Simd(4, 32) if target.float_abi == "hard" else Simd(4, 8)


def vconst(values: list[int], typ: ir.Type = I32) -> ir.Constant:
    return ir.Constant(ir.VectorType(typ, len(values)), [ir.Constant(typ, v) for v in values])


def _mangle(typ: ir.Type) -> str:
    if isinstance(typ, ir.VectorType):
        return f"v{typ.count}{_mangle(typ.element)}"
    return {ir.HalfType: "f16", ir.FloatType: "f32", ir.DoubleType: "f64"}.get(type(typ)) or f"i{typ.width}"


def masked_intrinsic(module: ir.Module, kind: str, vector: ir.VectorType) -> ir.Function:
    """``llvm.masked.load``/``llvm.masked.store`` on ``vector`` (declared once per module). With a
    constant mask they become plain loads/stores of the enabled lanes, or one masked instruction."""
    name = f"llvm.masked.{kind}.{_mangle(vector)}.p0"
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    mask, pointer = ir.VectorType(BIT, vector.count), vector.as_pointer()
    signature = ir.FunctionType(vector, [pointer, I32, mask, vector]) if kind == "load" else \
        ir.FunctionType(ir.VoidType(), [vector, pointer, I32, mask])
    return ir.Function(module, signature, name)


#: bytes of a cache line (x86-64): the step of ``prefetch_span``
CACHE_LINE = 64


def prefetch_span(b: ir.IRBuilder, ref: TensorRef, flat: Value, first: int, last: int) -> None:
    """Asks for the cache lines of elements flat+first .. flat+last of ``ref`` in L1 (``llvm.prefetch``:
    a hint, which never faults, so the span may reach outside the tensor)."""
    i8p = ir.IntType(8).as_pointer()
    function = b.module.globals.get("llvm.prefetch.p0i8") or ir.Function(
        b.module, ir.FunctionType(ir.VoidType(), [i8p, I32, I32, I32]), "llvm.prefetch.p0i8")
    step = max(1, CACHE_LINE // ref.type.dtype.itemsize)
    for offset in sorted({*range(first, last, step), last}):
        pointer = b.bitcast(b.gep(ref.ptr, [affine(b, offset, (flat, 1))]), i8p)
        b.call(function, [pointer, const(0), const(3), const(1)])       # read, keep in all levels, data
