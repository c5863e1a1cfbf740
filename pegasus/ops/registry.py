"""The one operator registry.

Each op is defined once, as a subclass of ``OpDef`` decorated with ``@register``: its typed ``Attrs``
dataclass (with defaults), ``infer`` (shape/dtype rule), ``reference`` (NumPy float kernel) and facts
the compiler reads (``elementwise``, ``inplace``, ``alias``). Later stages attach their pieces to the
same entry (integer kernel, LLVM emitter) rather than keeping lists of op names of their own.
Importers map a framework's operators onto these ops; they never redefine an op's meaning.
"""

from __future__ import annotations

import dataclasses
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
    _load_families()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"op '{name}' is not in the registry") from None


def all_ops() -> dict[str, type[OpDef]]:
    _load_families()
    return dict(sorted(_REGISTRY.items()))


def _load_families() -> None:
    import pegasus.ops  # noqa: F401  (importing the package registers every family)


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
    return opdef.Attrs(**{k: _freeze(v) for k, v in values.items()})


def attrs_to_dict(attrs: Any) -> dict[str, Any]:
    """Attributes as plain JSON-able values (tuples become lists), in declaration order."""
    def plain(value: Any) -> Any:
        if isinstance(value, tuple):
            return [plain(v) for v in value]
        return value

    return {f.name: plain(getattr(attrs, f.name)) for f in dataclasses.fields(attrs)}
