"""Pickles of tensors read as data: a small opcode interpreter of pegasus's own, never Python's unpickler.

``torch.save`` writes a tensor, a state_dict or a dict of tensors as a pickle whose every object is built by
calling a global (``torch._utils._rebuild_tensor_v2``, ``collections.OrderedDict``) and whose storages are
persistent ids naming ``data/<key>`` members of the zip. Python's unpickler calls whatever global a pickle
names; this interpreter knows the opcodes of protocols 0-4 and, in ``load``, accepts only the globals torch
writes for plain tensors, implemented here: a tensor becomes a ``PickledTensor`` (storage key, dtype, shape,
strides, offset) and ``materialize`` turns it and its storage bytes into a NumPy array after checking the
strides stay inside the storage and the size fits the budget. Any other global, a call of a storage type, a
persistent id that is not a storage, an extension code or a malformed opcode raises ``PickleRefused``.

``scan`` walks the same opcodes without the allow-list, recording every global a pickle names and
calling nothing (each object it would build is a placeholder): it is what describes a refused file
("a whole module pickled with torch.save(model)") and what checks TorchScript's own pickles.
"""

from __future__ import annotations

import ast
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from pegasus import limits
from pegasus.errors import PegasusError

#: torch's storage classes -> element dtype (bfloat16 is read as uint16 and widened to float32)
STORAGE_DTYPES = {"FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
                  "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
                  "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool",
                  "UntypedStorage": "uint8"}
ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2, "int8": 1,
            "uint8": 1, "bool": 1, "uint16": 2, "uint32": 4, "uint64": 8}
_MAX_LONG_BYTES = 64
_MAX_DEPTH_ITEMS = 10_000_000


class PickleRefused(PegasusError):
    """A pickle that is not tensors and containers; ``global_name`` is the global it named, if that is why."""

    def __init__(self, message: str, *, where: str | None = None, global_name: str | None = None):
        self.global_name = global_name
        super().__init__(message, where=where)


@dataclass(frozen=True)
class StorageRef:
    key: str
    dtype: str
    numel: int


@dataclass(frozen=True)
class PickledTensor:
    storage: StorageRef
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]


@dataclass(frozen=True)
class _Global:
    name: str


@dataclass(frozen=True)
class _Unknown:
    """What an object built by a global would be, in ``scan_globals`` (nothing is called)."""

    source: str


_MARK = object()
_STORAGE_PREFIXES = ("torch.", "torch.storage.")


def _storage_dtype(name: str) -> str | None:
    for prefix in _STORAGE_PREFIXES:
        if name.startswith(prefix) and name[len(prefix):] in STORAGE_DTYPES:
            return STORAGE_DTYPES[name[len(prefix):]]
    return None


_ALLOWED = {"collections.OrderedDict", "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor",
            "torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state"}


class _Machine:
    """The interpreter's state; ``strict`` decides whether globals are checked and called (by our code)."""

    def __init__(self, data: bytes, where: str, strict: bool):
        self.data, self.pos, self.where, self.strict = data, 0, where, strict
        self.stack: list[Any] = []
        self.memo: dict[int, Any] = {}
        self.globals: list[str] = []
        self.items = 0
        self.result: Any = None

    # reading -----------------------------------------------------------------------------------------
    def fail(self, message: str, global_name: str | None = None) -> PickleRefused:
        return PickleRefused(f"{message} (at byte {self.pos}; nothing in it was run)", where=self.where,
                             global_name=global_name)

    def take(self, count: int) -> bytes:
        if count < 0 or self.pos + count > len(self.data):
            raise self.fail("truncated pickle")
        chunk = self.data[self.pos:self.pos + count]
        self.pos += count
        return chunk

    def line(self) -> bytes:
        end = self.data.find(b"\n", self.pos)
        if end < 0:
            raise self.fail("truncated pickle (a line without its end)")
        chunk = self.data[self.pos:end]
        self.pos = end + 1
        return chunk

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))[0]

    def pop(self) -> Any:
        if not self.stack or self.stack[-1] is _MARK:
            raise self.fail("malformed pickle (pops an empty stack)")
        return self.stack.pop()

    def pop_mark(self) -> list:
        for index in range(len(self.stack) - 1, -1, -1):
            if self.stack[index] is _MARK:
                items = self.stack[index + 1:]
                del self.stack[index:]
                return items
        raise self.fail("malformed pickle (no MARK)")

    def push(self, value: Any) -> None:
        self.items += 1
        if self.items > _MAX_DEPTH_ITEMS:
            raise self.fail("pickle with too many objects")
        self.stack.append(value)

    def text_int(self, raw: bytes) -> int:
        text = raw.decode("ascii", "replace").rstrip("L")
        body = text[1:] if text[:1] in "+-" else text
        if not body.isdigit() or not body.isascii() or len(body) > 4 * _MAX_LONG_BYTES:
            raise self.fail(f"malformed integer {raw[:20]!r}")
        return int(text)

    # objects ------------------------------------------------------------------------------------------
    def resolve(self, module: Any, name: Any) -> Any:
        if not isinstance(module, str) or not isinstance(name, str):
            raise self.fail("a global whose module or name is not a string")
        full = f"{module}.{name}"
        self.globals.append(full)
        if not self.strict:
            return _Unknown(full)
        if full in _ALLOWED or _storage_dtype(full):
            return _Global(full)
        raise self.fail(f"a pickle that would call {full} when loaded (refused; pegasus reads tensors only)", full)

    def call(self, func: Any, args: Any) -> Any:
        if not self.strict:
            return _Unknown(getattr(func, "source", "?"))
        if not isinstance(func, _Global) or not isinstance(args, tuple):
            raise self.fail(f"a call of {func!r} (only tensor rebuilds are read)")
        name = func.name
        if name == "collections.OrderedDict":
            if args:
                raise self.fail("OrderedDict built from arguments (only empty ones are read)")
            return {}
        if name in ("torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor"):
            return self.rebuild_tensor(args, name)
        if name in ("torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state"):
            if len(args) not in (3, 4) or not isinstance(args[0], PickledTensor) or args[2] != {} or \
                    (len(args) == 4 and args[3] not in ({}, None)):
                raise self.fail("a parameter rebuilt with hooks or state (only plain parameters are read)")
            return args[0]
        raise self.fail(f"a call of {name} (storage types are not called)")

    def rebuild_tensor(self, args: tuple, name: str) -> PickledTensor:
        plain = len(args) == 4 if name.endswith("_tensor") else len(args) in (6, 7)
        if not plain:
            raise self.fail(f"{name} with {len(args)} arguments")
        storage, offset, shape, strides = args[:4]
        if len(args) >= 6 and args[5] != {}:
            raise self.fail("a tensor with backward hooks (only plain tensors are read)")
        ints = (isinstance(offset, int) and isinstance(shape, tuple) and isinstance(strides, tuple)
                and all(type(v) is int for v in (offset, *shape, *strides)))
        if not isinstance(storage, StorageRef) or not ints or len(shape) != len(strides):
            raise self.fail("a tensor rebuild with arguments that are not a storage, sizes and strides")
        return PickledTensor(storage, offset, shape, strides)

    def persistent(self, pid: Any) -> Any:
        if not self.strict:
            return _Unknown("persistent id")
        legacy = isinstance(pid, tuple) and len(pid) == 6 and pid[5] is None  # torch.save before 1.6: a view slot
        if not (isinstance(pid, tuple) and (len(pid) == 5 or legacy) and pid[0] == "storage"
                and isinstance(pid[1], _Global)
                and _storage_dtype(pid[1].name) and isinstance(pid[2], str) and type(pid[4]) is int and pid[4] >= 0):
            raise self.fail(f"a persistent id that is not a tensor storage: {str(pid)[:80]}")
        return StorageRef(pid[2], _storage_dtype(pid[1].name), pid[4])

    def build(self, obj: Any, state: Any) -> Any:
        if not self.strict:
            return obj
        if isinstance(obj, dict) and isinstance(state, dict) and set(state) <= {"_metadata"}:
            return obj  # a state_dict's _metadata (module versions): not needed
        raise self.fail("a BUILD that sets an object's state (only tensors and containers are read)")


def _set_items(machine: _Machine, target: Any, items: list) -> None:
    if len(items) % 2:
        raise machine.fail("malformed pickle (odd SETITEMS)")
    if not isinstance(target, dict):
        if machine.strict:
            raise machine.fail("SETITEMS on something that is not a dict")
        return
    for key, value in zip(items[::2], items[1::2]):
        try:
            target[key] = value
        except TypeError:
            raise machine.fail("a dict key that is not a plain value") from None


def _run(machine: _Machine) -> Any:
    m = machine
    while True:
        if m.pos >= len(m.data):
            raise m.fail("truncated pickle (no STOP)")
        op = m.data[m.pos:m.pos + 1]
        m.pos += 1
        if op == b".":
            return m.pop()
        handler = _OPS.get(op)
        if handler is None:
            raise m.fail(f"pickle opcode {op!r} is not read")
        handler(m)


def _simple(value_of):
    return lambda m: m.push(value_of(m))


def _string_literal(m: _Machine) -> bytes:
    raw = m.line()
    if len(raw) < 2 or raw[:1] not in (b"'", b'"') or raw[-1:] != raw[:1]:
        raise m.fail("malformed STRING")
    try:
        value = ast.literal_eval("b" + raw.decode("ascii"))
    except (ValueError, SyntaxError, UnicodeDecodeError):
        raise m.fail("malformed STRING") from None
    return value


def _int_line(m: _Machine) -> Any:
    raw = m.line()
    return {b"00": False, b"01": True}.get(raw) if raw in (b"00", b"01") else m.text_int(raw)


def _long_n(m: _Machine, size_fmt: str) -> int:
    size = m.unpack(size_fmt)
    if size > _MAX_LONG_BYTES:
        raise m.fail("an integer of more than 64 bytes")
    return int.from_bytes(m.take(size), "little", signed=True)


def _tuple_n(count: int):
    def op(m: _Machine) -> None:
        items = [m.pop() for _ in range(count)][::-1]
        m.push(tuple(items))
    return op


def _memo_put(m: _Machine, index: int) -> None:
    if not m.stack or m.stack[-1] is _MARK:
        raise m.fail("malformed pickle (memoises an empty stack)")
    m.memo[index] = m.stack[-1]


def _memo_get(m: _Machine, index: int) -> None:
    if index not in m.memo:
        raise m.fail(f"malformed pickle (memo {index} never stored)")
    m.push(m.memo[index])


def _append(m: _Machine, items: list) -> None:
    target = m.pop()
    if isinstance(target, list):
        target.extend(items)
    elif m.strict:
        raise m.fail("APPEND to something that is not a list")
    m.push(target)


def _setitems(m: _Machine, items: list) -> None:
    target = m.pop()
    _set_items(m, target, items)
    m.push(target)


def _global_text(m: _Machine) -> None:
    module = m.line().decode("utf-8", "replace")
    name = m.line().decode("utf-8", "replace")
    m.push(m.resolve(module, name))


def _stack_global(m: _Machine) -> None:
    name = m.pop()
    module = m.pop()
    m.push(m.resolve(module, name))


def _reduce(m: _Machine) -> None:
    args = m.pop()
    func = m.pop()
    m.push(m.call(func, args))


def _newobj(m: _Machine) -> None:
    m.pop()
    cls = m.pop()
    if m.strict:
        raise m.fail(f"NEWOBJ of {cls!r} (objects are not built)")
    m.push(_Unknown(getattr(cls, "source", "?")))


def _newobj_ex(m: _Machine) -> None:
    m.pop()
    _newobj(m)


def _inst(m: _Machine) -> None:
    module = m.line().decode("utf-8", "replace")
    name = m.line().decode("utf-8", "replace")
    m.pop_mark()
    m.push(m.resolve(module, name))
    if m.strict:
        raise m.fail(f"INST of {module}.{name}")


def _obj(m: _Machine) -> None:
    items = m.pop_mark()
    if not items:
        raise m.fail("malformed OBJ")
    if m.strict:
        raise m.fail("OBJ (objects are not built)")
    m.push(_Unknown(getattr(items[0], "source", "?")))


def _build(m: _Machine) -> None:
    state = m.pop()
    obj = m.pop()
    m.push(m.build(obj, state))


def _extension(size: str):
    def op(m: _Machine) -> None:
        code = m.unpack(size)
        m.globals.append(f"copyreg extension {code}")
        if m.strict:
            raise m.fail(f"a copyreg extension ({code}): a global by number", f"copyreg extension {code}")
        m.push(_Unknown(f"copyreg extension {code}"))
    return op


def _persid_text(m: _Machine) -> None:
    m.line()
    if m.strict:
        raise m.fail("a text persistent id (only storages are read)")
    m.push(_Unknown("persistent id"))


def _dict_from(m: _Machine) -> None:
    target: dict = {}
    _set_items(m, target, m.pop_mark())
    m.push(target)


def _frozen(m: _Machine) -> None:
    items = m.pop_mark()
    try:
        m.push(frozenset(items))
    except TypeError:
        raise m.fail("a set of values that are not plain") from None


def _add_items(m: _Machine) -> None:
    items = m.pop_mark()
    target = m.pop()
    if not isinstance(target, set):
        raise m.fail("ADDITEMS to something that is not a set")
    try:
        target.update(items)
    except TypeError:
        raise m.fail("a set of values that are not plain") from None
    m.push(target)


def _pop_mark(m: _Machine) -> None:
    m.pop_mark()


def _dup(m: _Machine) -> None:
    value = m.pop()
    m.push(value)
    m.push(value)


_OPS = {
    b"\x80": lambda m: m.take(1), b"\x95": lambda m: m.take(8),
    b"(": lambda m: m.stack.append(_MARK), b"0": lambda m: m.pop(), b"1": _pop_mark, b"2": _dup,
    b"N": _simple(lambda m: None), b"\x88": _simple(lambda m: True), b"\x89": _simple(lambda m: False),
    b"I": _simple(_int_line), b"J": _simple(lambda m: m.unpack("<i")), b"K": _simple(lambda m: m.unpack("<B")),
    b"M": _simple(lambda m: m.unpack("<H")), b"L": _simple(lambda m: m.text_int(m.line())),
    b"\x8a": _simple(lambda m: _long_n(m, "<B")), b"\x8b": _simple(lambda m: _long_n(m, "<i")),
    b"F": _simple(lambda m: float(m.line().decode("ascii", "replace"))), b"G": _simple(lambda m: m.unpack(">d")),
    b"S": _simple(_string_literal), b"T": _simple(lambda m: m.take(m.unpack("<i"))),
    b"U": _simple(lambda m: m.take(m.unpack("<B"))), b"B": _simple(lambda m: m.take(m.unpack("<I"))),
    b"C": _simple(lambda m: m.take(m.unpack("<B"))), b"\x8e": _simple(lambda m: m.take(m.unpack("<Q"))),
    b"\x96": _simple(lambda m: bytearray(m.take(m.unpack("<Q")))),
    b"V": _simple(lambda m: m.line().decode("raw-unicode-escape")),
    b"X": _simple(lambda m: m.take(m.unpack("<I")).decode("utf-8", "surrogatepass")),
    b"\x8c": _simple(lambda m: m.take(m.unpack("<B")).decode("utf-8", "surrogatepass")),
    b"\x8d": _simple(lambda m: m.take(m.unpack("<Q")).decode("utf-8", "surrogatepass")),
    b")": _simple(lambda m: ()), b"t": _simple(lambda m: tuple(m.pop_mark())),
    b"\x85": _tuple_n(1), b"\x86": _tuple_n(2), b"\x87": _tuple_n(3),
    b"]": _simple(lambda m: []), b"l": _simple(lambda m: m.pop_mark()), b"a": lambda m: _append(m, [m.pop()]),
    b"e": lambda m: _append(m, m.pop_mark()), b"}": _simple(lambda m: {}), b"d": _dict_from,
    b"s": lambda m: _setitems(m, [*reversed([m.pop(), m.pop()])]), b"u": lambda m: _setitems(m, m.pop_mark()),
    b"\x8f": _simple(lambda m: set()), b"\x90": _add_items, b"\x91": _frozen,
    b"p": lambda m: _memo_put(m, m.text_int(m.line())), b"q": lambda m: _memo_put(m, m.unpack("<B")),
    b"r": lambda m: _memo_put(m, m.unpack("<I")), b"\x94": lambda m: _memo_put(m, len(m.memo)),
    b"g": lambda m: _memo_get(m, m.text_int(m.line())), b"h": lambda m: _memo_get(m, m.unpack("<B")),
    b"j": lambda m: _memo_get(m, m.unpack("<I")),
    b"c": _global_text, b"\x93": _stack_global, b"R": _reduce, b"\x81": _newobj, b"\x92": _newobj_ex,
    b"i": _inst, b"o": _obj, b"b": _build, b"Q": lambda m: m.push(m.persistent(m.pop())), b"P": _persid_text,
    b"\x82": _extension("<B"), b"\x83": _extension("<H"), b"\x84": _extension("<i"),
}


def _interpret(data: bytes, where: str, strict: bool, start: int = 0) -> _Machine:
    machine = _Machine(data, where, strict)
    machine.pos = start
    try:
        machine.result = _run(machine)
    except PickleRefused:
        raise
    except (struct.error, UnicodeDecodeError, ValueError, OverflowError, RecursionError, MemoryError) as exc:
        raise machine.fail(f"malformed pickle ({type(exc).__name__})") from None
    return machine


def load(data: bytes, where: str) -> Any:
    """The value of a pickle of tensors and containers (tensors as ``PickledTensor``); anything else refused."""
    return _interpret(data, where, strict=True).result


def load_prefix(data: bytes, where: str, start: int = 0) -> tuple[Any, int]:
    """``load`` of the pickle starting at byte ``start`` of ``data``: (its value, the byte after its STOP). Several
    pickles one after another are how torch.save wrote files before torch 1.6."""
    machine = _interpret(data, where, strict=True, start=start)
    return machine.result, machine.pos


def is_tensor_global(name: str) -> bool:
    """Whether ``load`` accepts global ``name`` (a tensor rebuild, OrderedDict or a storage type)."""
    return name in _ALLOWED or _storage_dtype(name) is not None


def scan(data: bytes, where: str, start: int = 0) -> tuple[list[str], int]:
    """Every global the pickle at byte ``start`` names (``module.name``), in order, found without calling
    anything, and the byte after its STOP. A malformed pickle raises PickleRefused."""
    machine = _interpret(data, where, strict=False, start=start)
    return machine.globals, machine.pos


def materialize(tensor: PickledTensor, storage: bytes, what: str, where: str) -> np.ndarray:
    """The NumPy array of ``tensor`` (a contiguous copy; bfloat16 widened to float32), after checking its size
    against the budget and its strides against the storage's bytes."""
    ref = tensor.storage
    return strided_array(storage, ref.dtype, ref.numel, tensor.offset, tensor.shape, tensor.strides, what, where)


def strided_array(storage: bytes, dtype: str, numel: int, offset: int, shape, strides, what: str,
                  where: str) -> np.ndarray:
    """An array of ``shape`` read from ``numel`` elements of ``storage`` at ``offset`` with ``strides``
    (in elements), every index checked to lie inside the storage."""
    if dtype not in ITEMSIZE:
        raise PegasusError(f"{what}: dtype {dtype} is not read (float, int, uint8 and bool tensors are)", where=where)
    itemsize = ITEMSIZE[dtype]
    shape, strides = tuple(shape), tuple(strides)
    count = limits.element_count(shape, what, where)
    limits.check_tensor(shape, itemsize, what, where)
    if len(strides) != len(shape) or any(type(s) is not int or s < 0 for s in strides) or offset < 0:
        raise PegasusError(f"{what}: strides {list(strides)} or offset {offset} do not fit shape {list(shape)}",
                           where=where)
    limits.check_present(numel * itemsize, len(storage), what, where)
    if count:
        last = offset + sum((dim - 1) * stride for dim, stride in zip(shape, strides))
        if last >= numel:
            raise PegasusError(f"{what}: shape {list(shape)} with strides {list(strides)} at offset {offset} reads "
                               f"past the {numel} elements of its storage", where=where)
    raw = {"bfloat16": "<u2", "bool": "u1"}.get(dtype) or np.dtype(dtype).newbyteorder("<").str
    flat = np.frombuffer(storage, dtype=raw, count=numel)
    if count:
        view = np.lib.stride_tricks.as_strided(flat[offset:], shape, tuple(s * itemsize for s in strides),
                                               writeable=False)
    else:
        view = np.zeros(shape, raw)
    if dtype == "bfloat16":
        return (view.astype(np.uint32) << 16).view(np.float32).copy()
    if dtype == "bool":
        return view != 0
    return np.array(view, dtype=np.dtype(dtype), copy=True)
