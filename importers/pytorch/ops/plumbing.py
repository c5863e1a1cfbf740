"""The plumbing a TorchScript or torch.export graph carries around its layers, folded at import.

With the input shapes fixed, ``x.size(0)``, ``int(t)``, list and tuple building and unpacking, integer
arithmetic, comparisons and the shape checks a scripted module makes (``prim::If`` + ``prim::RaiseException``)
are all known at import: they become Python values (``TorchContext.values``), never layers. ``prim::If``
converts the branch its condition selects. Ops that change nothing at inference (dropout, contiguous,
detach, clone, ``to`` the same dtype) become the tensor they read; ``zeros``/``ones``/``full`` become
constants.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode, convert_nodes
from pegasus.importers.pytorch.context import TABLE, Ref, TorchContext, converter, dim

#: torch ScalarType numbers (TorchScript's dtype arguments) -> NumPy
SCALAR_TYPES = {0: np.uint8, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.int64, 5: np.float16, 6: np.float32,
                7: np.float64, 11: np.bool_, 15: np.float32}


def numpy_dtype(value, default=np.float32) -> np.dtype:
    """A dtype argument (ScalarType number, torch.dtype, None) as a NumPy dtype."""
    if value is None:
        return np.dtype(default)
    if isinstance(value, int):
        return np.dtype(SCALAR_TYPES.get(value, np.float32))
    name = str(value).replace("torch.", "")
    return np.dtype({"bfloat16": "float32", "half": "float16", "long": "int64", "bool": "bool"}.get(name, name))


def inputs(ctx: TorchContext, node: SourceNode) -> list:
    return ctx.args(node)["inputs"]


@converter("prim::ListConstruct", "prim::TupleConstruct", plumbing=True)
def construct(ctx: TorchContext, node: SourceNode) -> None:
    ctx.set_value(node, list(inputs(ctx, node)))


@converter("aten::list", "aten::copy", plumbing=True)
def copy_list(ctx: TorchContext, node: SourceNode) -> None:
    """A copy of a Python list (``list(x.size())``); a tensor copy is the tensor."""
    value = next(iter(ctx.args(node).values()))
    if ctx.is_tensor(value):
        ctx.alias(node, value)
    else:
        ctx.set_value(node, list(value))


@converter("aten::append", plumbing=True)
def append(ctx: TorchContext, node: SourceNode) -> None:
    """list.append, in place: the list value is the same Python object wherever it is read."""
    args = ctx.args(node)
    args["self"].append(args["el"])
    ctx.set_value(node, args["self"])


@converter("prim::ListUnpack", "prim::TupleUnpack", plumbing=True)
def unpack(ctx: TorchContext, node: SourceNode) -> None:
    items = inputs(ctx, node)[0]
    if not isinstance(items, (list, tuple)) or len(items) != len(node.outputs):
        raise PegasusError(f"{node.describe()}: cannot unpack {items!r} into {len(node.outputs)} values")
    for index, item in enumerate(items):
        _bind(ctx, node, index, item)


def _bind(ctx: TorchContext, node: SourceNode, index: int, item) -> None:
    if ctx.is_tensor(item):
        ctx.alias(node, item, index)
    else:
        ctx.values[node.outputs[index]] = item


@converter("prim::TupleIndex", "aten::__getitem__", "getitem", plumbing=True)
def getitem(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    items, index = args.get("inputs") or [args.get("list"), args.get("idx")]
    _bind(ctx, node, 0, items[int(index)])


@converter("aten::size", "aten::sym_size", plumbing=True)
def size(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    shape = list(ctx.shape(args["self"]))
    ctx.set_value(node, shape[dim(int(args["dim"]), len(shape))] if args.get("dim") is not None else shape)


@converter("aten::dim", plumbing=True)
def rank(ctx: TorchContext, node: SourceNode) -> None:
    ctx.set_value(node, ctx.rank(ctx.args(node)["self"]))


@converter("aten::numel", plumbing=True)
def numel(ctx: TorchContext, node: SourceNode) -> None:
    ctx.set_value(node, math.prod(ctx.shape(ctx.args(node)["self"])))


@converter("aten::len", plumbing=True)
def length(ctx: TorchContext, node: SourceNode) -> None:
    ctx.set_value(node, len(next(iter(ctx.args(node).values()))))


@converter("prim::NumToTensor", "aten::scalar_tensor", plumbing=True)
def num_to_tensor(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    value = args.get("s", next(iter(args.values())))
    ctx.builder.set_constant(node.outputs[0], np.asarray(value, np.int64 if isinstance(value, int) else np.float32))


@converter("aten::Int", "aten::Float", "aten::Bool", "aten::ScalarImplicit", "aten::item", "prim::unchecked_cast",
           "aten::IntImplicit", "aten::FloatImplicit", plumbing=True)
def to_scalar(ctx: TorchContext, node: SourceNode) -> None:
    value = next(iter(ctx.args(node).values()))
    if isinstance(value, list) and len(value) == 1 and node.op_type == "prim::unchecked_cast":
        value = value[0]
    if node.op_type == "prim::unchecked_cast" and ctx.is_tensor(value):
        ctx.alias(node, value)
        return
    number = ctx.number(node, value, "scalar") if ctx.is_tensor(value) else value
    cast = {"aten::Int": int, "aten::IntImplicit": int, "aten::Float": float, "aten::FloatImplicit": float,
            "aten::Bool": bool}.get(node.op_type)
    ctx.set_value(node, cast(number) if cast else number)


#: the integer and boolean operations of shape arithmetic, on Python values
_PYTHON_OPS = {"aten::gt": operator.gt, "aten::lt": operator.lt, "aten::ge": operator.ge, "aten::le": operator.le,
               "aten::eq": operator.eq, "aten::ne": operator.ne, "aten::floordiv": operator.floordiv,
               "aten::remainder": operator.mod, "aten::__and__": operator.and_, "aten::__or__": operator.or_,
               "aten::__is__": operator.is_, "aten::__isnot__": operator.is_not, "aten::__not__": operator.not_,
               "aten::__contains__": operator.contains,
               "aten::__range_length": lambda lo, hi, step: len(range(lo, hi, step)),  # a for loop's trip count
               "aten::__derive_index": lambda index, start, step: start + index * step}


#: a torch.export program's arithmetic on symbolic sizes (Python's operator functions and torch's sym_* ones, named
#: by their __name__): the sizes are numbers at import
_SYMBOLIC = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "floordiv": operator.floordiv,
             "truediv": operator.truediv, "mod": operator.mod, "pow": operator.pow, "neg": operator.neg,
             "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le, "gt": operator.gt,
             "ge": operator.ge, "and_": operator.and_, "or_": operator.or_, "not_": operator.not_,
             "sym_not": operator.not_, "sym_max": max, "sym_min": min, "sym_int": int, "sym_float": float}


@converter(*_SYMBOLIC, plumbing=True)
def symbolic(ctx: TorchContext, node: SourceNode) -> None:
    operands = ctx.args(node)["inputs"]
    if any(ctx.is_tensor(v) or not isinstance(v, (bool, int, float)) for v in operands):
        raise PegasusError(f"{node.describe()}: {node.op_type} of {operands!r}: only sizes known at import")
    ctx.set_value(node, _SYMBOLIC[node.op_type](*operands))


#: comparisons of tensors (a core-ATen program's prelu is where(x > 0, ...)): registry op, negated
_COMPARISONS = {"aten::gt": ("Greater", False), "aten::lt": ("Less", False), "aten::ge": ("GreaterOrEqual", False),
                "aten::le": ("LessOrEqual", False), "aten::eq": ("Equal", False), "aten::ne": ("Equal", True)}


def _compare(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    a, b = args["self"], args["other"]
    like = a if ctx.is_tensor(a) else b
    op, negated = _COMPARISONS[node.op_type]
    inputs = [ctx.tensor(node, a, like, "self"), ctx.tensor(node, b, like, "other")]
    if not negated:
        ctx.emit(op, inputs, node=node)
        return
    equal = ctx.emit(op, inputs, node=node, suffix="/equal")[0]
    ctx.emit("Not", [equal], node=node)


def python_operands(ctx: TorchContext, node: SourceNode) -> list | None:
    """The node's operands when none is a tensor (shape arithmetic), else None."""
    values = ctx.args(node)
    values = values.get("inputs", list(values.values()))
    return None if any(ctx.is_tensor(v) for v in values) else values


@converter(*_PYTHON_OPS, plumbing=True)
def python_op(ctx: TorchContext, node: SourceNode) -> None:
    operands = python_operands(ctx, node)
    if operands is None and node.op_type in ("aten::__is__", "aten::__isnot__"):  # `hx is None` on a tensor
        operands = list(ctx.args(node).values())
    if operands is None and node.op_type in _COMPARISONS:
        _compare(ctx, node)
        return
    if operands is None:
        raise PegasusError(f"{node.describe()}: {node.op_type} on tensors is not supported")
    ctx.set_value(node, _PYTHON_OPS[node.op_type](*operands))


def fold_python(ctx: TorchContext, node: SourceNode, fn) -> bool:
    """Compute ``fn`` on the operands when none is a tensor (shape arithmetic); True when done."""
    operands = python_operands(ctx, node)
    if operands is None:
        return False
    ctx.set_value(node, fn(*operands))
    return True


@converter("prim::If", plumbing=True)
def if_(ctx: TorchContext, node: SourceNode) -> None:
    """Convert the branch the (import-time) condition selects; its results become the If's outputs."""
    condition = ctx.resolve(node.attrs["inputs"][0])
    if not isinstance(condition, (bool, int, np.bool_)):
        raise PegasusError(f"{node.describe()}: the condition depends on tensor values, which pegasus cannot "
                           "branch on (control flow is not supported)")
    nodes, results = node.attrs["blocks"][0 if condition else 1]
    convert_nodes(TABLE, ctx, nodes)
    for index, result in enumerate(results):
        _bind(ctx, node, index, ctx.resolve(result))


#: the most iterations a loop is unrolled for
MAX_UNROLL = 4096


def _renamed(nodes: list[SourceNode], results: list, params: list, suffix: str):
    """A copy of a block (its nodes, results and parameters) whose own values carry ``suffix``, so that a loop
    body can be converted once per iteration."""
    own = {ref.name for ref in params}
    pending = list(nodes)
    while pending:
        node = pending.pop()
        own.update(node.outputs)
        for block, _ in node.attrs.get("blocks", ()):
            pending.extend(block)
        own.update(ref.name for ref in node.attrs.get("params", ()))

    def rename(value):
        if isinstance(value, Ref):
            return Ref(value.name + suffix) if value.name in own else value
        if isinstance(value, list):
            return [rename(v) for v in value]
        if isinstance(value, tuple):  # a nested block: (nodes, results)
            return (copy(value[0]), rename(value[1]))
        return value

    def copy(block: list[SourceNode]) -> list[SourceNode]:
        return [SourceNode(n.name, n.op_type, [i + suffix if i in own else i for i in n.inputs],
                           [o + suffix for o in n.outputs], {k: rename(v) for k, v in n.attrs.items()}, n.domain,
                           n.where) for n in block]

    return copy(nodes), rename(results), rename(params)


def _set(ctx: TorchContext, node: SourceNode, name: str, value) -> None:
    """Value ``name`` is ``value``: a tensor through an Identity (so nodes reading it find it), else a value."""
    if ctx.is_tensor(value):
        ctx.emit("Identity", [value], node=node, outputs=[name], suffix="/carried")
    else:
        ctx.values[name] = value


@converter("prim::Loop", plumbing=True)
def loop(ctx: TorchContext, node: SourceNode) -> None:
    """A loop whose trip count and condition are known at import, unrolled: the body converted once per
    iteration under fresh names, the carried values passed along."""
    trip, condition, *carried = [ctx.resolve(v) for v in node.attrs["inputs"]]
    nodes, results = node.attrs["blocks"][0]
    iteration = 0
    while condition and iteration < trip:
        if iteration == MAX_UNROLL or not isinstance(condition, (bool, np.bool_)):
            raise PegasusError(f"{node.describe()}: a loop pegasus cannot unroll (its condition depends on tensor "
                               f"values, or it runs more than {MAX_UNROLL} times)")
        body, outs, params = _renamed(nodes, results, node.attrs["params"], f"~{iteration}")
        for param, value in zip(params, [iteration, *carried]):
            _set(ctx, node, param.name, value)
        convert_nodes(TABLE, ctx, body)
        condition, *carried = [ctx.resolve(v) for v in outs]
        iteration += 1
    for index, value in enumerate(carried):
        _bind(ctx, node, index, value)


@converter("prim::RaiseException", plumbing=True)
def raise_exception(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    message = next((v for v in args.get("inputs", list(args.values())) if isinstance(v, str)), "")
    raise PegasusError(f"{node.describe()}: the model raises for these input shapes: {message}".rstrip(": "))


@converter("aten::format", plumbing=True)
def format_message(ctx: TorchContext, node: SourceNode) -> None:
    """A message (``why_not_fast_path = "... {}".format(...)``, whose emptiness a module's forward tests): the
    format string with the values known at import."""
    args = ctx.args(node)
    text, *values = args["inputs"] if "inputs" in args else [args["self"]]
    try:
        ctx.set_value(node, str(text).format(*values))
    except (IndexError, KeyError, ValueError):
        ctx.set_value(node, str(text))


@converter("prim::dtype", plumbing=True)
def dtype_of(ctx: TorchContext, node: SourceNode) -> None:
    """``tensor.dtype``, as TorchScript holds it: the ScalarType number (``mask.dtype != torch.bool``)."""
    args = ctx.args(node)
    x = args["inputs"][0] if "inputs" in args else next(iter(args.values()))
    numpy = ctx.type_of(x).dtype.numpy
    ctx.set_value(node, next(code for code, dtype in SCALAR_TYPES.items() if np.dtype(dtype) == numpy))


@converter("aten::warn", "prim::Uninitialized", "aten::str", "prim::device",
           "aten::_assert_tensor_metadata", "aten::_assert_scalar", "aten::sym_constrain_range_for_size",
           "prim::requires_grad", "prim::is_cuda", plumbing=True)
def nothing(ctx: TorchContext, node: SourceNode) -> None:
    """Values only checks and messages use."""
    for out in node.outputs:
        ctx.values[out] = None


@converter("aten::is_grad_enabled", "aten::is_autocast_enabled", "prim::is_nested", plumbing=True)
def inference_state(ctx: TorchContext, node: SourceNode) -> None:
    """The state a model runs in on a microcontroller: no gradients, no autocast, no nested tensors (the checks
    before nn.MultiheadAttention's fused fast path, which a scripted model makes at run time)."""
    ctx.set_value(node, False)


@converter("aten::is_floating_point", plumbing=True)
def is_floating_point(ctx: TorchContext, node: SourceNode) -> None:
    ctx.set_value(node, ctx.type_of(ctx.args(node)["self"]).dtype.is_float)


@converter("prim::type", plumbing=True)
def device_type(ctx: TorchContext, node: SourceNode) -> None:
    """``tensor.device.type``: the model runs on the CPU."""
    ctx.set_value(node, "cpu")


@converter("aten::all", "aten::any", plumbing=True)
def all_any(ctx: TorchContext, node: SourceNode) -> None:
    """all/any of a list of booleans known at import (checks); of a tensor, refused."""
    values = ctx.args(node)["self"]
    if not isinstance(values, (list, tuple)) or any(not isinstance(v, bool) for v in values):
        raise PegasusError(f"{node.describe()}: {node.op_type[6:]} of a tensor is not supported")
    ctx.set_value(node, (all if node.op_type == "aten::all" else any)(values))


@converter(*[f"aten::{op}{inplace}" for op in ("dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout")
             for inplace in ("", "_")],
           "aten::contiguous", "aten::detach", "aten::detach_", "aten::clone", "aten::lift_fresh",
           "aten::lift_fresh_copy", "aten::alias", "aten::type_as")
def identity(ctx: TorchContext, node: SourceNode) -> None:
    """Dropout at inference (``nn.Dropout(inplace=True)`` too), copies and memory-layout changes: the tensor
    itself (type_as on a tensor of the same dtype; another dtype is a Cast)."""
    args = ctx.args(node)
    x = args.get("input", args.get("self"))
    other = args.get("other")
    if node.op_type == "aten::type_as" and ctx.type_of(other).dtype != ctx.type_of(x).dtype:
        ctx.emit("Cast", [x], {"to": ctx.type_of(other).dtype.value}, node=node)
    else:
        ctx.alias(node, x)


@converter("aten::to", "aten::_to_copy", "aten::type")
def to(ctx: TorchContext, node: SourceNode) -> None:
    """``to(dtype)`` casts; ``to(device)``, ``to(other)`` with the same dtype, and copies change nothing."""
    args = ctx.args(node)
    x = args["self"]
    dtype = args.get("dtype")
    if ctx.is_tensor(args.get("other")):
        dtype = ctx.type_of(args["other"]).dtype.value
    if dtype is None or numpy_dtype(dtype) == ctx.type_of(x).dtype.numpy:
        ctx.alias(node, x)
    else:
        ctx.emit("Cast", [x], {"to": str(numpy_dtype(dtype))}, node=node)


@converter("aten::arange", plumbing=True)
def arange(ctx: TorchContext, node: SourceNode) -> None:
    """A range known at import (a sequence's positions), as a constant: int64 unless a bound is a float, as in
    PyTorch."""
    args = ctx.args(node)
    bounds = [ctx.number(node, args.get(key, default), key) for key, default in (("start", 0), ("end", None),
                                                                                 ("step", 1))]
    default = np.float32 if any(isinstance(v, float) for v in bounds) else np.int64
    ctx.builder.set_constant(node.outputs[0], np.arange(*bounds).astype(numpy_dtype(args.get("dtype"), default)))


@converter("aten::tensor", "aten::as_tensor", plumbing=True)
def tensor_of(ctx: TorchContext, node: SourceNode) -> None:
    """``torch.tensor([0, 2])`` of numbers known at import, as a constant (int64 for integers, as PyTorch)."""
    args = ctx.args(node)
    data = args.get("data", args.get("t"))
    if ctx.is_tensor(data):
        ctx.alias(node, data)
        return
    array = np.asarray(data)
    default = np.float32 if array.dtype.kind == "f" else array.dtype
    ctx.builder.set_constant(node.outputs[0], array.astype(numpy_dtype(args.get("dtype"), default)))


@converter("aten::zeros", "aten::ones", "aten::full", "aten::zeros_like", "aten::ones_like", "aten::full_like",
           "aten::new_zeros", "aten::new_ones", "aten::empty", "aten::new_full", plumbing=True)
def filled(ctx: TorchContext, node: SourceNode) -> None:
    """A tensor of one value, as a constant (recurrent layers' initial states, masks)."""
    args = ctx.args(node)
    like = args.get("self")
    shape = args.get("size") if args.get("size") is not None else ctx.shape(like)
    fill = 1 if "ones" in node.op_type else args.get("fill_value", 0)
    default = ctx.type_of(like).dtype.numpy if ctx.is_tensor(like) else np.float32
    ctx.builder.set_constant(node.outputs[0], np.full(tuple(shape), fill, numpy_dtype(args.get("dtype"), default)))
