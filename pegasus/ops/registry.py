"""The one operator registry.

Each op is defined once, as a subclass of ``OpDef`` decorated with ``@register``: its typed ``Attrs``
dataclass (with defaults), ``infer`` (shape/dtype rule), ``reference`` (NumPy float kernel) and facts
the compiler reads (``elementwise``, ``inplace``, ``alias``). Later stages attach their pieces to the
same entry (integer kernel, LLVM emitter) rather than keeping lists of op names of their own.
Importers map a framework's operators onto these ops; they never redefine an op's meaning.
Importing any ``pegasus.ops`` module first runs the package's ``__init__``, which imports every family, so
``get_op`` and ``all_ops`` always see the whole registry (this module imports no family itself).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from pegasus.ir.tensor import TensorType


class ShapeError(ValueError):
    """Raised by an op's ``infer`` when its inputs' shapes or attributes do not fit together."""


@dataclasses.dataclass(frozen=True)
class NoAttrs:
    """Attributes of an op that has none."""


class OpDef:
    """Base of every registry entry. Subclasses override ``infer`` and ``reference``."""

    name: ClassVar[str]
    Attrs: ClassVar[type] = NoAttrs
    #: (min, max) number of inputs; max None = variadic. Omitted optional inputs are passed as None.
    num_inputs: ClassVar[tuple[int, int | None]] = (1, 1)
    #: output i has the same shape as input 0 and is computed element by element.
    elementwise: ClassVar[bool] = False
    #: the output may be written over input 0's buffer (it reads each element before writing it).
    inplace: ClassVar[bool] = False
    #: the output is input 0's bytes reinterpreted (Reshape, Flatten, Squeeze): no copy needed.
    alias: ClassVar[bool] = False
    #: False for ops that read only their inputs' shapes (Shape, Size): always folded at import.
    needs_values: ClassVar[bool] = True

    # Facts the later stages read (quantizers, integer rules, passes, exporters) through pegasus.ops.facts,
    # declared here once instead of in lists of op names of their own. Most ops keep the defaults.
    #: output values are a selection or rearrangement of input 0's values (Reshape, Transpose, Slice, Gather...):
    #: the op runs unchanged on integer levels, its output on input 0's grid (the generic integer rule,
    #: pegasus/quantized/rules/values.py ``passthrough``)
    value_preserving: ClassVar[bool] = False
    #: the output takes input 0's grid though the op is not ``value_preserving`` (its integer rule is its own:
    #: MaxPool refuses a used Indices output, Pad pads and Resize interpolates levels); ``OpFacts.tied`` is
    #: this or ``value_preserving``
    keeps_input_grid: ClassVar[bool] = False
    #: an activation a producer may apply as its requantisation clamp; ``activation_bounds`` gives its real bounds
    clamp: ClassVar[bool] = False
    #: a one-input element-wise function of the value alone: an integer rule may tabulate it on every input level
    tabulable: ClassVar[bool] = False
    #: a per-channel affine by a constant operand: (the operand positions the other tensor may take, how the
    #: constant acts: "scale", "shift" or "negative shift"), e.g. Mul ((0, 1), "scale"); None for other ops
    channel_affine: ClassVar[tuple[tuple[int, ...], str] | None] = None
    #: a pooling a convolution group may end with (exporters/glow fuse.py)
    fusable_pool: ClassVar[bool] = False
    #: the value is the sum of its two operands: a convolution group may take one as its residual sum
    residual_sum: ClassVar[bool] = False
    #: its element formula takes vectors as it takes elements (the exporters' float loops may use lanes)
    vector_safe: ClassVar[bool] = False
    #: an op of the quantized graph only: the integer lowering emits it (QConv, Requantize, LookupTable, the
    #: bfloat16 rounding...), so it needs no integer rule of its own
    quantized_form: ClassVar[bool] = False
    #: the input holding the layer's bias (per output channel), None without one
    bias_input: ClassVar[int | None] = None

    @staticmethod
    def weight_axis(attrs: Any, index: int, rank: int) -> int | None:
        """The output-channel axis of input ``index`` (of rank ``rank``) when it is the layer's weight tensor."""
        return None

    @staticmethod
    def activation_bounds(attrs: Any) -> tuple[float | None, float | None]:
        """A ``clamp`` op's real bounds (None: unbounded on that side)."""
        raise NotImplementedError

    @staticmethod
    def infer(attrs: Any, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        raise NotImplementedError

    @staticmethod
    def reference(attrs: Any, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        raise NotImplementedError


_REGISTRY: dict[str, type[OpDef]] = {}


def register(cls: type[OpDef]) -> type[OpDef]:
    """Class decorator adding an op to the registry under ``cls.name``."""
    if cls.name in _REGISTRY:
        raise ValueError(f"op {cls.name} registered twice")
    if not dataclasses.is_dataclass(cls.Attrs):
        raise TypeError(f"{cls.name}.Attrs must be a dataclass")
    _REGISTRY[cls.name] = cls
    return cls


def get_op(name: str) -> type[OpDef]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"op '{name}' is not in the registry") from None


def all_ops() -> dict[str, type[OpDef]]:
    return dict(sorted(_REGISTRY.items()))


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.ndarray):
        return _freeze(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    return value


def make_attrs(op: str | type[OpDef], **values: Any) -> Any:
    """Build an op's Attrs from keyword values (lists become tuples); unknown names are an error."""
    opdef = get_op(op) if isinstance(op, str) else op
    fields = {f.name for f in dataclasses.fields(opdef.Attrs)}
    unknown = set(values) - fields
    if unknown:
        raise TypeError(f"{opdef.name} has no attribute(s) {sorted(unknown)} (has {sorted(fields)})")
    frozen = {k: _freeze(v) for k, v in values.items()}
    hints = _attr_hints(opdef.Attrs)
    for key, value in frozen.items():
        if not _fits(value, hints.get(key)):
            raise ShapeError(f"attribute '{key}' must be {_kind(hints[key])}, not {_shown(value)}")
    return opdef.Attrs(**frozen)


#: Attrs class -> {field: type hint}; the hints checked against values from model files (issue 35: an ONNX
#: attribute or a NAME.json attribute of the wrong kind must be refused where it is set, not crash a shape rule)
_HINTS: dict[type, dict[str, Any]] = {}


def _attr_hints(attrs_class: type) -> dict[str, Any]:
    if attrs_class not in _HINTS:
        try:
            _HINTS[attrs_class] = typing.get_type_hints(attrs_class)
        except Exception:  # noqa: BLE001 — an annotation that does not resolve is not checked
            _HINTS[attrs_class] = {}
    return _HINTS[attrs_class]


def _fits(value: Any, hint: Any) -> bool:
    """Whether an attribute value is of the kind its field declares (hints other than these are not checked)."""
    if hint is None or hint is Any:
        return True
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in args)
    if hint is type(None):
        return value is None
    if hint in (int, bool):
        return isinstance(value, (int, np.integer)) or isinstance(value, float) and value.is_integer()
    if hint is float:
        return isinstance(value, (int, float, np.integer, np.floating))
    if hint is str:
        return isinstance(value, str)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return isinstance(value, tuple) and all(_fits(v, args[0]) for v in value)
    return True


def _kind(hint: Any) -> str:
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_kind(arg) for arg in args)
    if typing.get_origin(hint) is tuple and args:
        return f"a list of {_kind(args[0]).removeprefix('an ').removeprefix('a ')}s"
    return {int: "an integer", bool: "a boolean", float: "a number", str: "a string",
            type(None): "absent"}.get(hint, str(hint))


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


def attrs_to_dict(attrs: Any) -> dict[str, Any]:
    """Attributes as plain JSON-able values (tuples become lists), in declaration order."""
    def plain(value: Any) -> Any:
        if isinstance(value, tuple):
            return [plain(v) for v in value]
        return value

    return {f.name: plain(getattr(attrs, f.name)) for f in dataclasses.fields(attrs)}
