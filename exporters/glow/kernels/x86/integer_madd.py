"""x86 building blocks for integer dot products with PMADDWD, used by the QConv and QMatMul emitters
(integer_conv.py, integer_matmul.py) on x86-64 hosts: registered as the flavours ``madd.lanes`` and ``madd.dot``
(integer_flavours.py), which the portable kernels look up.

PMADDWD multiplies 16-bit lanes pairwise and adds neighbouring products into 32-bit lanes; LLVM folds
``acc + pmaddwd(x, w)`` into one VPDPWSSD on CPUs with AVX-512 VNNI / AVX-VNNI. Its 32-bit result is
the exact sum taken modulo 2**32 (the lone overflow, (-2**15)**2 * 2, wraps to the same residue), so
it serves every i32 accumulator of integer_dot.py, whose sums are modular anyway. LLVM does not
form PMADDWD from plain IR with several sums per loop, hence the intrinsics: AVX-512BW (32 lanes),
AVX2 (16) or SSE2 (8, part of x86-64), chosen from the target's CPU features.
"""

from __future__ import annotations

import llvmlite.binding as llvm
from llvmlite import ir

from pegasus.exporters.glow.kernels.integer.integer_conv_plan import ConvPlan
from pegasus.exporters.glow.kernels.integer.integer_dot import accumulate, zeroed
from pegasus.exporters.glow.kernels.integer.integer_flavours import flavour
from pegasus.exporters.glow.llvm.functions import intrinsic
from pegasus.exporters.glow.llvm.loops import const, for_range
from pegasus.exporters.glow.llvm.types import I16, I32

Value = ir.Value
#: PMADDWD intrinsic by its number of 16-bit input lanes.
INTRINSICS = {32: "llvm.x86.avx512.pmaddw.d.512", 16: "llvm.x86.avx2.pmadd.wd", 8: "llvm.x86.sse2.pmadd.wd"}
LEVELS = {"x86-64-v3": {"avx2"}, "x86-64-v4": {"avx2", "avx512bw"}}


@flavour("madd.lanes")
def madd_lanes(target) -> int:
    """16-bit lanes of the widest PMADDWD of an x86-64 target (exporters.glow.target.Target); 0 elsewhere."""
    if target.arch != "x86_64":
        return 0
    if target.cpu == llvm.get_host_cpu_name() and not target.features:
        flags = {name for name, on in llvm.get_host_cpu_features().items() if on}
    else:
        flags = {f[1:] for f in target.features.split(",") if f.startswith("+")} | LEVELS.get(target.cpu, set())
    if "avx512bw" in flags:
        return 32
    return 16 if "avx2" in flags else 8


def vector(element: ir.Type, lanes: int) -> ir.VectorType:
    return ir.VectorType(element, lanes)


def mask(indices: list[int]) -> ir.Constant:
    return ir.Constant(vector(I32, len(indices)), indices)


def padded(b: ir.IRBuilder, value: Value, lanes: int) -> Value:
    """``value`` (a vector) with zero lanes appended up to ``lanes``."""
    count = value.type.count
    if count == lanes:
        return value
    return b.shuffle_vector(value, ir.Constant(value.type, None), mask(list(range(count)) + [count] * (lanes - count)))


def load_lanes(b: ir.IRBuilder, pointer: Value, count: int, signed: bool, lanes: int) -> Value:
    """``count`` 8- or 16-bit values at ``pointer`` as a <lanes x i16> (zero lanes after ``count``)."""
    element = pointer.type.pointee
    loaded = b.load(b.bitcast(pointer, vector(element, count).as_pointer()), align=element.width // 8)
    if element.width != 16:
        loaded = b.sext(loaded, vector(I16, count)) if signed else b.zext(loaded, vector(I16, count))
    return padded(b, loaded, lanes)


def madd(b: ir.IRBuilder, x: Value, w: Value) -> Value:
    """PMADDWD of two <n x i16> (n = 8, 16, 32): <n/2 x i32> sums of neighbouring products."""
    lanes = x.type.count
    return b.call(intrinsic(b.module, INTRINSICS[lanes], vector(I32, lanes // 2), [vector(I16, lanes)] * 2), [x, w])


def reduce_all(b: ir.IRBuilder, vectors: list[Value]) -> list[Value]:
    """The lane sums of equally long i32 vectors, by a tree that halves every vector and merges pairs
    (one add per two vectors and level instead of a full horizontal sum each)."""
    count = vectors[0].type.count
    zero = ir.Constant(vectors[0].type, None)
    items = [(v, [i]) for i, v in enumerate(vectors)]        # (vector, owners of its groups of `size` lanes)
    size = count
    while size > 1:
        if len(items) % 2:
            items.append((zero, [None] * len(items[0][1])))
        half = size // 2
        lows = [g * size + j for g in range(count // size) for j in range(half)]
        highs = [lane + half for lane in lows]
        items = [(b.add(b.shuffle_vector(a, c, mask(lows + [count + i for i in lows])),
                        b.shuffle_vector(a, c, mask(highs + [count + i for i in highs]))), owners_a + owners_c)
                 for (a, owners_a), (c, owners_c) in zip(items[::2], items[1::2])]
        size = half
    sums: dict[int, Value] = {}
    for total, owners in items:
        for lane, owner in enumerate(owners):
            if owner is not None:
                sums[owner] = b.extract_element(total, ir.Constant(I32, lane))
    return [sums[i] for i in range(len(vectors))]


@flavour("madd.dot")
def dot_madd(b: ir.IRBuilder, cp: ConvPlan, buffer: Value, w_rows: list[Value], count: int) -> list[list[Value]]:
    """The im2col kernel's dot products (integer_im2col.py) with PMADDWD: a loop over whole vectors of the
    reduction, then pieces of 16, 8 and the last depth % 8 taps (zero-padded), one vector accumulator per output,
    summed by a tree."""
    lanes, depth = cp.madd, cp.mac.depth
    accumulator = ir.VectorType(I32, lanes // 2)
    slots = [[zeroed(b, accumulator) for _ in range(count)] for _ in w_rows]

    def chunk(first: Value, width: int) -> None:
        size = max(8, width)
        xs = [load_lanes(b, b.gep(buffer, [cp.slot(b, p, first)], inbounds=True), width, True, size)
              for p in range(count)]
        for c, w_row in enumerate(w_rows):
            weights = load_lanes(b, cp.w.address(b, b.add(w_row, first)), width, cp.mac.w.signed, size)
            for p in range(count):
                accumulate(b, slots[c][p], padded(b, madd(b, xs[p], weights), lanes // 2))

    full, rest = divmod(depth, lanes)
    if full:
        with for_range(b, full, name="q") as q:
            chunk(b.mul(q, const(lanes)), lanes)
    first = full * lanes
    for width in (16, 8):
        if width < lanes and rest >= width:
            chunk(const(first), width)
            first, rest = first + width, rest - width
    if rest:
        chunk(const(first), rest)
    totals = reduce_all(b, [b.load(slot) for row in slots for slot in row])
    return [totals[c * count:(c + 1) * count] for c in range(len(w_rows))]
