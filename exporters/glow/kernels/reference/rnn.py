"""Emitters for the recurrent layers RNN, GRU and LSTM (pegasus/ops/rnn.py).

Mirrors the reference: one shared time loop (``recurrent``) and one cell per op (``CELLS``). Each
batch entry is an independent recurrence, so the loops run direction (unrolled at compile time: each
direction has its own activations and time order) → batch entry → time step, and a recurrence keeps
its state in a few scratch buffers (the bundle has no heap and no mutable globals): H (and C for LSTM),
the gate pre-activations and one more hidden vector — (states + gates + 1) x hidden_size floats, 6 KB
for an LSTM with 256 units — in the layer's workspace, which the memory planner places in the
activations region (``registry.workspace``).

A step first projects the input, ``gates = X_t W^T + Wb``, as the reference does outside the cell;
the cell then adds ``H R^T`` (the same matrix-vector product helper, contiguous rows, reductions with
``reassoc`` so LLVM vectorises them) and applies its gate formulas in one element-wise loop that
overwrites the state. Sums are grouped as the reference groups them ((X W^T + Wb) + H R^T + Rb).
Steps past an entry's ``sequence_lens`` keep its state and write zeros to Y; an empty sequence ends
in zero states. float16 tensors are computed in float32, as the reference does, state included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from llvmlite import ir

from pegasus.errors import PegasusError
from pegasus.exporters.glow.kernels.context import KernelContext, piece
from pegasus.exporters.glow.kernels.reference.elementwise import UNARY
from pegasus.exporters.glow.kernels.registry import emitter, workspace
from pegasus.exporters.glow.llvm.convert import convert, load_as, store_as
from pegasus.exporters.glow.llvm.functions import entry_alloca
from pegasus.exporters.glow.llvm.loops import affine, const, for_range
from pegasus.exporters.glow.llvm.scalar import Arith, compute_dtype
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.exporters.glow.llvm.tiles import for_tiles
from pegasus.exporters.glow.llvm.types import llvm_type
from pegasus.ir.dtypes import DType
from pegasus.ir.tensor import TensorType
from pegasus.ops.registry import get_op, make_attrs
from pegasus.ops.rnn import Recurrent

#: Fast-math flags of the dot products: LLVM may reorder (vectorise) and fuse the sums.
DOT = ("reassoc", "contract")
#: Rows of a matrix-vector product computed together (independent sums: latency hidden, vec loaded once).
ROWS = 4
Activation = Callable[[Arith, ir.Value], ir.Value]
I64 = ir.IntType(64)


# ---- activations ------------------------------------------------------------------------------------

#: The activations without an op of their own (ONNX's Affine and ScaledTanh) and their defaults.
_LOCAL: dict[str, tuple[dict[str, float], Callable[..., ir.Value]]] = {
    "Affine": ({"alpha": 1.0, "beta": 0.0}, lambda ar, v, x: ar.add(ar.mul(v["alpha"], x), v["beta"])),
    "ScaledTanh": ({"alpha": 1.0, "beta": 1.0},
                   lambda ar, v, x: ar.mul(v["alpha"], ar.fn("tanh", ar.mul(v["beta"], x)))),
}


def _activation(op: str, values: dict[str, float]) -> Activation:
    if op in _LOCAL:
        defaults, formula = _LOCAL[op]
        merged = {**defaults, **values}
        return lambda ar, x: formula(ar, merged, x)
    attrs, formula = make_attrs(get_op(op), **values), UNARY[op].fn
    return lambda ar, x: formula(ar, attrs, x)


def activations(op: type[Recurrent], attrs) -> list[list[Activation]]:
    """Each direction's activation formulas, from the op's own activation specs."""
    return [[_activation(name, values) for name, values in direction] for direction in op.activation_specs(attrs)]


# ---- buffers and products ---------------------------------------------------------------------------


def view(b: ir.IRBuilder, ref: TensorRef, offset: ir.Value | int, count: int) -> TensorRef:
    """``count`` elements of ``ref`` from flat ``offset`` on, as a 1-D tensor."""
    return TensorRef(ref.address(b, offset), TensorType((count,), ref.type.dtype))


def scratch(k: KernelContext, count: int, dtype: DType) -> TensorRef:
    """A buffer of ``count`` elements from the layer's workspace."""
    b = k.builder
    slot = k.scratch(ir.ArrayType(llvm_type(dtype), count), count * dtype.itemsize)
    return TensorRef(b.gep(slot, [const(0), const(0)], inbounds=True), TensorType((count,), dtype))


def _buffer_counts(k: KernelContext) -> tuple[DType, int, list[int]]:
    """The compute type, hidden size and element counts of the scratch buffers: states, gates, spare."""
    op = get_op(k.node.op)
    hidden = k.inputs[2].shape[-1]
    return compute_dtype(k.inputs[0].type.dtype), hidden, [hidden] * op.states + [op.gates * hidden, hidden]


@dataclass
class Step:
    """What a cell needs for one time step of one batch entry in one direction: this direction's
    weights, its activations, and the scratch buffers (state H, C; gate pre-activations; one spare)."""

    ar: Arith
    attrs: Any
    fns: list[Activation]
    hidden: int
    r: TensorRef
    rb: TensorRef | None
    p: TensorRef | None
    h: TensorRef
    c: TensorRef | None
    gates: TensorRef
    spare: TensorRef

    @property
    def b(self) -> ir.IRBuilder:
        return self.ar.b

    def load(self, ref: TensorRef, flat: ir.Value | int) -> ir.Value:
        return load_as(self.b, ref, flat, self.ar.dtype)

    @contextmanager
    def units(self, count: int | None = None) -> Iterator[ir.Value]:
        """A loop over hidden units (``count`` elements, default hidden_size)."""
        with for_range(self.b, count or self.hidden, name="unit") as j:
            yield j

    def product(self, out: TensorRef, vec: TensorRef, mat: TensorRef, rows: int, add: TensorRef | None) -> None:
        """out[j] = add[j] + vec . mat[j, :] for j < rows (mat row-major, rows of len(vec)); out may be add.
        Rows go in tiles of ROWS: independent sums that share each load of vec."""
        for_tiles(self.b, 0, rows, ROWS, lambda first, count: self._rows(out, vec, mat, first, count, add))

    def _rows(self, out: TensorRef, vec: TensorRef, mat: TensorRef, first: ir.Value, count: int,
              add: TensorRef | None) -> None:
        b, ar, depth = self.b, self.ar, vec.shape[0]
        totals = [entry_alloca(b, ar.type) for _ in range(count)]
        for total in totals:
            b.store(ar.const(0), total)
        with for_range(b, depth, name="dot") as i:
            x = self.load(vec, i)
            for r, total in enumerate(totals):
                term = b.fmul(x, self.load(mat, affine(b, r * depth, (first, depth), (i, 1))), flags=DOT)
                b.store(b.fadd(b.load(total), term, flags=DOT), total)
        for r, total in enumerate(totals):
            j, value = affine(b, r, (first, 1)), b.load(total)
            store_as(b, out, j, value if add is None else ar.add(self.load(add, j), value), ar.dtype)

    def recurrent(self, out: TensorRef, state: TensorRef, first_row: int, rows: int) -> None:
        """out += state R[first_row:first_row+rows]^T."""
        mat = view(self.b, self.r, first_row * self.hidden, rows * self.hidden)
        self.product(out, state, mat, rows, out)

    def gate(self, gate: int, j: ir.Value) -> ir.Value:
        """The gates buffer at ``gate``, unit j (a pre-activation, or the activation a cell stored)."""
        return self.load(self.gates, affine(self.b, gate * self.hidden, (j, 1)))

    def pre(self, gate: int, j: ir.Value, *extra: ir.Value) -> ir.Value:
        """Pre-activation of ``gate`` at unit j: gates + Rb (+ extra terms, in order)."""
        value = self.gate(gate, j)
        if self.rb is not None:
            value = self.ar.add(value, self.load(self.rb, affine(self.b, gate * self.hidden, (j, 1))))
        for term in extra:
            value = self.ar.add(value, term)
        return value

    def peephole(self, gate: int, j: ir.Value, c: ir.Value) -> tuple[ir.Value, ...]:
        """P_gate * c as an extra pre-activation term (none without P)."""
        if self.p is None:
            return ()
        return (self.ar.mul(self.load(self.p, affine(self.b, gate * self.hidden, (j, 1))), c),)

    def act(self, index: int, value: ir.Value, clip: bool = True) -> ir.Value:
        """Activation ``index`` of this direction, of the clipped value (clip only where the op clips)."""
        limit = self.attrs.clip
        if clip and limit is not None:
            value = self.ar.min(self.ar.max(value, -limit), limit)
        return self.fns[index](self.ar, value)


# ---- the cells --------------------------------------------------------------------------------------


def rnn_cell(s: Step) -> None:
    """H = f(X W^T + Wb + H R^T + Rb)."""
    s.recurrent(s.gates, s.h, 0, s.hidden)
    with s.units() as j:
        s.h.store(s.b, s.act(0, s.pre(0, j)), j)


def gru_cell(s: Step) -> None:
    """z, r = f(...) (gates z, r, h); candidate h~ = g(...); H = (1 - z) * h~ + z * H."""
    ar, n = s.ar, s.hidden
    s.recurrent(s.gates, s.h, 0, 2 * n)
    with s.units(2 * n) as j:
        s.gates.store(s.b, s.act(0, s.pre(0, j)), j)     # z and r, activated in place
    candidate = _gru_reset_after(s) if s.attrs.linear_before_reset else _gru_reset_before(s)
    with s.units() as j:
        z = s.gate(0, j)
        h = ar.add(ar.mul(ar.sub(1, z), s.act(1, candidate(j))), ar.mul(z, s.load(s.h, j)))
        s.h.store(s.b, h, j)


def _gru_reset_before(s: Step) -> Callable[[ir.Value], ir.Value]:
    """h~'s pre-activation X W_h^T + Wb_h + (r * H) R_h^T + Rb_h (r * H in the spare buffer)."""
    n = s.hidden
    with s.units() as j:
        s.spare.store(s.b, s.ar.mul(s.gate(1, j), s.load(s.h, j)), j)
    s.recurrent(view(s.b, s.gates, 2 * n, n), s.spare, 2 * n, n)
    return lambda j: s.pre(2, j)


def _gru_reset_after(s: Step) -> Callable[[ir.Value], ir.Value]:
    """h~'s pre-activation with linear_before_reset: X W_h^T + Wb_h + r * (H R_h^T + Rb_h)."""
    ar, n = s.ar, s.hidden
    s.product(s.spare, s.h, view(s.b, s.r, 2 * n * n, n * n), n, None)

    def candidate(j: ir.Value) -> ir.Value:
        recurrent = s.load(s.spare, j)
        if s.rb is not None:
            recurrent = ar.add(recurrent, s.load(s.rb, affine(s.b, 2 * n, (j, 1))))
        return ar.add(s.gate(2, j), ar.mul(s.gate(1, j), recurrent))
    return candidate


def lstm_cell(s: Step) -> None:
    """Gates i, o, f, c: C = f * C + i * g(c~) (clipped to ±cell_clip when set); H = o * h(C), peepholes on C
    (o's on the new C)."""
    ar = s.ar
    s.recurrent(s.gates, s.h, 0, 4 * s.hidden)
    with s.units() as j:
        c = s.load(s.c, j)
        i = s.act(0, s.pre(0, j, *s.peephole(0, j, c)))
        f = ar.sub(1, i) if s.attrs.input_forget else s.act(0, s.pre(2, j, *s.peephole(2, j, c)))
        c = ar.add(ar.mul(f, c), ar.mul(i, s.act(1, s.pre(3, j))))
        if s.attrs.cell_clip is not None:
            c = ar.min(ar.max(c, -s.attrs.cell_clip), s.attrs.cell_clip)
        o = s.act(0, s.pre(1, j, *s.peephole(1, j, c)))
        s.c.store(s.b, c, j)
        s.h.store(s.b, ar.mul(o, s.act(2, c, clip=False)), j)


CELLS: dict[str, Callable[[Step], None]] = {"RNN": rnn_cell, "GRU": gru_cell, "LSTM": lstm_cell}


# ---- the shared time loop ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Flat positions in X, Y and the state tensors for layout 0 (time-major) or 1 (batch-major)."""

    batch_major: bool

    def x(self, ref: TensorRef, b: ir.IRBuilder, t: ir.Value, n: ir.Value) -> ir.Value:
        return ref.flat(b, [n, t, 0] if self.batch_major else [t, n, 0])

    def y(self, ref: TensorRef, b: ir.IRBuilder, t: ir.Value, d: int, n: ir.Value) -> ir.Value:
        return ref.flat(b, [n, t, d, 0] if self.batch_major else [t, d, n, 0])

    def state(self, ref: TensorRef, b: ir.IRBuilder, d: int, n: ir.Value) -> ir.Value:
        return ref.flat(b, [n, d, 0] if self.batch_major else [d, n, 0])


@dataclass
class Layer:
    """The tensors and static facts of one recurrent layer."""

    k: KernelContext
    op: type[Recurrent]
    ar: Arith
    layout: Layout
    seq: int
    hidden: int
    states: list[TensorRef]          # scratch H (and C)
    gates: TensorRef
    spare: TensorRef

    @property
    def b(self) -> ir.IRBuilder:
        return self.k.builder

    def input(self, index: int) -> TensorRef | None:
        return self.k.inputs[index] if index < len(self.k.inputs) else None

    def output(self, index: int) -> TensorRef | None:
        return self.k.outputs[index] if index < len(self.k.outputs) else None

    def step(self, d: int, fns: list[Activation]) -> Step:
        b, g = self.b, self.op.gates * self.hidden
        r, bias, p = self.input(2), self.input(3), self.input(7)
        return Step(self.ar, self.k.attrs, fns, self.hidden, view(b, r, d * g * self.hidden, g * self.hidden),
                    None if bias is None else view(b, bias, d * 2 * g + g, g),
                    None if p is None else view(b, p, d * 3 * self.hidden, 3 * self.hidden),
                    self.states[0], self.states[1] if len(self.states) > 1 else None, self.gates, self.spare)

    def length(self, n: ir.Value) -> ir.Value | None:
        """sequence_lens[n] as i64, or None when every sequence is full."""
        lens = self.input(4)
        return None if lens is None else convert(self.b, lens.load(self.b, n), lens.type.dtype, DType.INT64)

    def copy_state(self, dst: TensorRef, dst_flat: ir.Value, src: TensorRef, src_flat: ir.Value,
                   keep: ir.Value | None) -> None:
        """dst[dst_flat:+hidden] = src[src_flat:+hidden], or zeros where ``keep`` is false."""
        b = self.b
        with for_range(b, self.hidden, name="unit") as j:
            value = load_as(b, src, affine(b, 0, (src_flat, 1), (j, 1)), self.ar.dtype)
            if keep is not None:
                value = b.select(keep, value, self.ar.const(0))
            store_as(b, dst, affine(b, 0, (dst_flat, 1), (j, 1)), value, self.ar.dtype)

    def begin(self, d: int, n: ir.Value) -> None:
        """States from initial_h / initial_c, or zeros."""
        for state, initial in zip(self.states, (self.input(5), self.input(6))):
            if initial is None:
                with for_range(self.b, self.hidden, name="unit") as j:
                    state.store(self.b, self.ar.const(0), j)
            else:
                self.copy_state(state, const(0), initial, self.layout.state(initial, self.b, d, n), None)

    def run(self, d: int, reverse: bool, fns: list[Activation], n: ir.Value) -> None:
        """One direction of batch entry n: every time step, then the final states."""
        b, x, w, bias, y = self.b, self.input(0), self.input(1), self.input(3), self.output(0)
        g = self.op.gates * self.hidden
        size = x.shape[-1]
        step, length = self.step(d, fns), self.length(n)
        self.begin(d, n)
        weights, wb = view(b, w, d * g * size, g * size), None if bias is None else view(b, bias, d * 2 * g, g)
        with for_range(b, self.seq, name="t") as i:
            t = b.sub(const(self.seq - 1), i) if reverse else i
            valid = None if length is None else b.icmp_signed("<", b.zext(t, I64), length)
            with _only_if(b, valid):
                step.product(self.gates, view(b, x, self.layout.x(x, b, t, n), size), weights, g, wb)
                CELLS[self.op.name](step)
            if y is not None:
                self.copy_state(y, self.layout.y(y, b, t, d, n), self.states[0], const(0), valid)
        nonempty = None if length is None else b.icmp_signed(">", length, ir.Constant(I64, 0))
        for state, final in zip(self.states, (self.output(1), self.output(2))):
            if final is not None:
                self.copy_state(final, self.layout.state(final, b, d, n), state, const(0), nonempty)


@contextmanager
def _only_if(b: ir.IRBuilder, condition: ir.Value | None) -> Iterator[None]:
    if condition is None:
        yield
        return
    with b.if_then(condition, likely=True):
        yield


@workspace(*CELLS)
def recurrent_workspace(k: KernelContext) -> int:
    if not k.inputs[0].type.dtype.is_float:
        return 0
    dtype, _, counts = _buffer_counts(k)
    return sum(piece(count * dtype.itemsize) for count in counts)


@emitter(*CELLS)
def recurrent(k: KernelContext) -> None:
    op: type[Recurrent] = get_op(k.node.op)
    x = k.inputs[0]
    if not x.type.dtype.is_float:
        raise PegasusError(f"{op.name} on {x.type.dtype.value} is not supported by the Glow exporter (float only)",
                           where=f"layer '{k.node.name}'")
    b = k.builder
    compute, hidden, counts = _buffer_counts(k)
    seq = x.shape[1] if k.attrs.layout else x.shape[0]
    batch = x.shape[0] if k.attrs.layout else x.shape[1]
    buffers = [scratch(k, count, compute) for count in counts]
    layer = Layer(k, op, Arith(b, compute, k.math), Layout(bool(k.attrs.layout)), seq, hidden,
                  buffers[:op.states], buffers[op.states], buffers[op.states + 1])
    for d, (reverse, fns) in enumerate(zip(op.directions(k.attrs), activations(op, k.attrs))):
        with for_range(b, batch, name="entry") as n:
            layer.run(d, reverse, fns, n)
