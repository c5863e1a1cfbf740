"""The values of a torch.export program's JSON (torch/_export/serde/schema.py), read as data with one-line errors.

The program is a tree of dataclasses written as JSON objects; a union (``Argument``, ``SymInt``, ``InputSpec``)
is an object with exactly one key naming its field. ``Reader`` checks each value's JSON type as it is taken (a
list where an object is expected, a string ``config`` ...) and names the place in the error. Arguments become
the Python values the converters expect (a ``Ref`` for a graph value, numbers, lists, dtypes), the way torch's
deserializer would have built them; a symbolic size (``as_expr``) is read as None (unknown) after its text is
checked to be plain ASCII arithmetic over shape symbols (nothing evaluates it).
"""

from __future__ import annotations

import math
import re
from typing import Any

from pegasus.errors import PegasusError
from pegasus.importers.pytorch.context import Ref

#: schema ScalarType -> torch dtype name (str(torch.<name>) without 'torch.')
SCALAR_TYPES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float16", 7: "float32", 8: "float64",
                9: "complex32", 10: "complex64", 11: "complex128", 12: "bool", 13: "bfloat16", 28: "uint16",
                29: "float8_e4m3fn", 30: "float8_e5m2", 31: "float8_e4m3fnuz", 32: "float8_e5m2fnuz",
                33: "float8_e8m0fnu", 34: "uint32", 35: "uint64"}
LAYOUTS = {1: "torch.sparse_coo", 2: "torch.sparse_csr", 3: "torch.sparse_csc", 4: "torch.sparse_bsr",
           5: "torch.sparse_bsc", 6: "torch._mkldnn", 7: "torch.strided"}
MEMORY_FORMATS = {1: "torch.contiguous_format", 2: "torch.channels_last", 3: "torch.channels_last_3d",
                  4: "torch.preserve_format"}
_FLOATS = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}
_DEVICE = re.compile(r"[a-z_]{1,20}")

#: a symbolic size expression: shape symbols, integers, the functions torch writes, operators; quoted symbol names
#: only inside Symbol('s77', positive=True, integer=True)
_EXPR_TOKEN = re.compile(r"\s*(?:([A-Za-z_][A-Za-z_0-9]*)|(\d+(?:\.\d+)?)|('[a-z]{1,3}\d+')"
                         r"|(\*\*|//|==|!=|<=|>=|[-+*/%(),<>=]))")
_EXPR_NAMES = {"Max", "Min", "FloorDiv", "CeilDiv", "Mod", "PythonMod", "ModularIndexing", "CleanDiv", "FloorToInt",
               "CeilToInt", "TruncToInt", "IntTrueDiv", "FloatTrueDiv", "ToFloat", "Abs", "floor", "ceiling",
               "Symbol", "Integer", "positive", "integer", "nonnegative", "real", "finite", "True", "False", "Eq",
               "Ne", "And", "Or", "Not", "oo"}
_SYMBOL = re.compile(r"[a-z]{1,3}\d+")


def plain_expression(text: str) -> bool:
    """Whether ``text`` is ASCII arithmetic over shape symbols (``s0``, ``Symbol('s77', positive=True)``),
    integers and the functions torch writes (``Max``, ``FloorDiv``...), nothing else."""
    if not text.isascii() or len(text) > 2000:
        return False
    pos = 0
    while pos < len(text):
        match = _EXPR_TOKEN.match(text, pos)
        if not match or match.end() == pos:
            return text[pos:].strip() == ""
        name = match.group(1)
        if name is not None and not (_SYMBOL.fullmatch(name) or name in _EXPR_NAMES):
            return False
        pos = match.end()
    return True


class Reader:
    """Typed access to the JSON of one member; ``where`` is the file, ``member`` the member's name."""

    def __init__(self, where: str, member: str):
        self.where, self.member = where, member

    def fail(self, what: str, problem: str) -> PegasusError:
        return PegasusError(f"{self.member}: {what} {problem}", where=self.where)

    def obj(self, value: Any, what: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(what, f"is {_kind(value)}, not an object")
        return value

    def list(self, value: Any, what: str) -> list:
        if not isinstance(value, list):
            raise self.fail(what, f"is {_kind(value)}, not a list")
        return value

    def str(self, value: Any, what: str) -> str:
        if not isinstance(value, str):
            raise self.fail(what, f"is {_kind(value)}, not a string")
        return value

    def int(self, value: Any, what: str) -> int:
        if type(value) is not int:
            raise self.fail(what, f"is {_kind(value)}, not an integer")
        return value

    def float(self, value: Any, what: str) -> float:
        if isinstance(value, str) and value in _FLOATS:
            return _FLOATS[value]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(what, f"is {_kind(value)}, not a number")
        return float(value)

    def bool(self, value: Any, what: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(what, f"is {_kind(value)}, not true or false")
        return value

    def get(self, obj: dict, key: str, what: str, default: Any = ...) -> Any:
        if key not in obj:
            if default is ...:
                raise self.fail(what, f"has no '{key}'")
            return default
        return obj[key]

    def union(self, value: Any, what: str) -> tuple[str, Any]:
        """(field, value) of a schema union: an object with exactly one key."""
        value = self.obj(value, what)
        if len(value) != 1:
            raise self.fail(what, f"has {len(value)} fields (a union has one)")
        return next(iter(value.items()))

    # schema values -----------------------------------------------------------------------------------
    def dtype(self, value: Any, what: str) -> str:
        code = self.int(value, what)
        if code not in SCALAR_TYPES:
            raise self.fail(what, f"is dtype {code}, which pegasus does not know")
        return SCALAR_TYPES[code]

    def sym_int(self, value: Any, what: str) -> int | None:
        """A SymInt: an integer, or None for a symbolic size (its expression checked, never evaluated)."""
        kind, body = self.union(value, what)
        if kind == "as_int":
            return self.int(body, what)
        if kind == "as_expr":
            text = self.str(self.get(self.obj(body, what), "expr_str", what), f"{what} expression")
            if not plain_expression(text):
                raise self.fail(what, f"symbolic shape expression {text[:60]!r} is not plain arithmetic: refused")
            return int(text.strip()) if text.strip().isdigit() else None
        raise self.fail(what, f"is a '{kind}', not a size")

    def tensor_meta(self, value: Any, what: str) -> tuple[str, tuple[int | None, ...]]:
        """(dtype name, sizes with None for symbolic) of a TensorMeta."""
        meta = self.obj(value, what)
        dtype = self.dtype(self.get(meta, "dtype", what), f"{what} dtype")
        sizes = self.list(self.get(meta, "sizes", what), f"{what} sizes")
        return dtype, tuple(self.sym_int(s, f"{what} size") for s in sizes)

    def strided(self, value: Any, what: str) -> tuple[str, tuple[int, ...], tuple[int, ...], int]:
        """(dtype, sizes, strides, storage offset) of a stored tensor's TensorMeta: every one a number."""
        meta = self.obj(value, what)
        dtype, sizes = self.tensor_meta(meta, what)
        strides = tuple(self.sym_int(s, f"{what} stride") for s in self.list(self.get(meta, "strides", what), what))
        offset = self.sym_int(self.get(meta, "storage_offset", what, {"as_int": 0}), f"{what} storage offset")
        layout = self.get(meta, "layout", what, 7)
        if None in sizes or None in strides or offset is None:
            raise self.fail(what, "has a symbolic size, stride or offset (a stored tensor's are numbers)")
        if layout != 7:
            raise self.fail(what, f"has layout {layout!r} (only dense, strided tensors are read)")
        return dtype, sizes, strides, offset

    def argument(self, value: Any, what: str) -> Any:
        """An Argument as the value the converters see (a Ref for a graph value)."""
        kind, body = self.union(value, what)
        reader = _ARGUMENTS.get(kind)
        if reader is None:
            raise self.fail(what, f"is an argument of kind '{kind}', which pegasus does not read")
        return reader(self, body, what)

    def ref(self, body: Any, what: str) -> Ref:
        return Ref(self.str(self.get(self.obj(body, what), "name", what), what))

    def sym_arg(self, body: Any, what: str) -> Any:
        kind, value = self.union(body, what)
        if kind == "as_name":
            return Ref(self.str(value, what))
        if kind == "as_int":
            return self.int(value, what)
        if kind == "as_float":
            return self.float(value, what)
        if kind == "as_bool":
            return self.bool(value, what)
        raise self.fail(what, f"is a '{kind}', not a symbolic value")

    def optional_tensor(self, body: Any, what: str) -> Ref | None:
        kind, value = self.union(body, what)
        if kind == "as_none":
            return None
        if kind == "as_tensor":
            return self.ref(value, what)
        raise self.fail(what, f"is a '{kind}', not an optional tensor")


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _device(r: Reader, body: Any, what: str) -> str:
    device = r.obj(body, what)
    kind = r.str(r.get(device, "type", what), what)
    index = r.get(device, "index", what, None)
    if not _DEVICE.fullmatch(kind) or (index is not None and (type(index) is not int or index < 0)):
        raise r.fail(what, f"is not a device: {str(device)[:60]}")
    return kind if index is None else f"{kind}:{index}"


def _enum(table: dict, name: str):
    def read(r: Reader, body: Any, what: str) -> str:
        code = r.int(body, what)
        if code not in table:
            raise r.fail(what, f"is {name} {code}, which pegasus does not know")
        return table[code]
    return read


def _scalar_type(r: Reader, body: Any, what: str):
    import torch  # a dtype value, as the converters receive it from torch's own loader

    return getattr(torch, r.dtype(body, what))


def _list_of(item):
    return lambda r, body, what: [item(r, v, what) for v in r.list(body, what)]


_ARGUMENTS = {
    "as_none": lambda r, body, what: None,
    "as_tensor": Reader.ref,
    "as_tensors": _list_of(Reader.ref),
    "as_int": Reader.int,
    "as_ints": _list_of(Reader.int),
    "as_float": Reader.float,
    "as_floats": _list_of(Reader.float),
    "as_bool": Reader.bool,
    "as_bools": _list_of(Reader.bool),
    "as_string": Reader.str,
    "as_strings": _list_of(Reader.str),
    "as_sym_int": Reader.sym_arg,
    "as_sym_ints": _list_of(Reader.sym_arg),
    "as_sym_float": Reader.sym_arg,
    "as_sym_floats": _list_of(Reader.sym_arg),
    "as_sym_bool": Reader.sym_arg,
    "as_sym_bools": _list_of(Reader.sym_arg),
    "as_scalar_type": _scalar_type,
    "as_memory_format": _enum(MEMORY_FORMATS, "memory format"),
    "as_layout": _enum(LAYOUTS, "layout"),
    "as_device": _device,
    "as_optional_tensors": _list_of(Reader.optional_tensor),
    "as_complex": lambda r, body, what: complex(r.float(r.get(r.obj(body, what), "real", what), what),
                                                r.float(r.get(body, "imag", what), what)),
    "as_int_lists": _list_of(_list_of(Reader.int)),
    "as_float_lists": _list_of(_list_of(Reader.float)),
    "as_nested_tensors": _list_of(_list_of(Reader.ref)),
}
