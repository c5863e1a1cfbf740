"""Counted loops for kernels: ``for_range`` and ``loop_nest`` build the blocks, phi and branch of a
loop with a static trip count (what LLVM unrolls and vectorises best)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from llvmlite import ir

from pegasus.exporters.glow.llvm.types import Value

I32 = ir.IntType(32)


def const(value: int) -> ir.Constant:
    return ir.Constant(I32, int(value))


@contextmanager
def for_range(builder: ir.IRBuilder, count: int | ir.Value, start: int | ir.Value = 0, step: int = 1,
              name: str = "i", unroll: bool = True) -> Iterator[ir.Value]:
    """``for (i = start; i < count; i += step) { body }``; yields i (i32). ``unroll=False`` tells LLVM not to
    unroll it (a body that already uses every register: unrolled, its loads are hoisted and spilled)."""
    count = const(count) if isinstance(count, int) else count
    start = const(start) if isinstance(start, int) else start
    before = builder.block
    header = builder.append_basic_block(f"{name}.head")
    body = builder.append_basic_block(f"{name}.body")
    after = builder.append_basic_block(f"{name}.end")
    builder.branch(header)
    builder.position_at_end(header)
    index = builder.phi(I32, name=name)
    index.add_incoming(start, before)
    builder.cbranch(builder.icmp_signed("<", index, count), body, after)
    builder.position_at_end(body)
    yield index
    following = builder.add(index, const(step), name=f"{name}.next", flags=("nsw",))
    index.add_incoming(following, builder.block)
    latch = builder.branch(header)
    if not unroll:
        latch.set_metadata("llvm.loop", no_unroll(builder.module))
    builder.position_at_end(after)


def no_unroll(module: ir.Module) -> ir.MDValue:
    """A loop ID (self-referential, as LLVM's loop metadata must be) saying ``llvm.loop.unroll.disable``."""
    disable = module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")])
    loop_id = module.add_metadata([disable, ir.MetaDataString(module, f"pegasus.loop.{len(module.metadata)}")])
    loop_id.operands = (loop_id, disable)
    return loop_id


@contextmanager
def loop_nest(builder: ir.IRBuilder, counts: Sequence[int], names: str = "ijklmnop") -> Iterator[list[ir.Value]]:
    """Nested counted loops, outermost first; yields the list of indices."""
    if not counts:
        yield []
        return
    with for_range(builder, counts[0], name=f"{names[0]}{len(counts)}") as index:
        with loop_nest(builder, counts[1:], names[1:]) as inner:
            yield [index, *inner]


def affine(b: ir.IRBuilder, offset: int, *terms: tuple[Value | int, int]) -> Value:
    """offset + sum(value * coefficient) as i32, folding constant parts."""
    total, fixed = None, offset
    for value, coef in terms:
        if coef == 0:
            continue
        if isinstance(value, int):
            fixed += value * coef
            continue
        term = value if coef == 1 else b.mul(value, const(coef), flags=("nsw",))
        total = term if total is None else b.add(total, term, flags=("nsw",))
    if total is None:
        return const(fixed)
    return total if fixed == 0 else b.add(total, const(fixed), flags=("nsw",))
