"""What a PyTorch file is, found without running anything in it, and the guard that runs before torch reads it.

PyTorch files are zip archives or pickles, and Python's unpickler calls whatever global a pickle names
(``os.system`` as easily as ``torch._utils._rebuild_tensor_v2``). pegasus reads two kinds of file, and
hands either to torch only after this module has checked every pickle torch would read in it:

- a TorchScript archive (``torch.jit.save``): ``data.pkl``, ``constants.pkl`` and the ``*.debug_pkl``
  files are read by TorchScript's own C++ unpickler, which resolves only tensor-rebuild functions, a few
  containers and TorchScript classes (``__torch__.*``, compiled from the archive's ``code/``), never a
  Python global; but loading calls a class's TorchScript ``__setstate__``, and TorchScript has ops that
  write files (``aten::save``). So the pickles are checked against the allow-list below, an archive whose
  code defines ``__setstate__`` is refused, and torchscript.py refuses any op without a converter before
  ``torch.jit.freeze`` (whose constant propagation runs ops) sees the graph.
- a torch.export program (``torch.export.save``, ``.pt2``): the program is JSON, but ``torch.export.load``
  (torch 2.13) reads sample inputs with ``torch.load(weights_only=True)`` and, when that fails, with
  ``weights_only=False``; pickled weights and constants with ``weights_only=False``; "opaque" constants with
  ``pickle.loads``; and it hands every symbolic-shape expression (``expr_str``) to ``sympy.sympify``, which
  evaluates it as Python. So every pickle in it (nested ``torch.save`` zips included) is checked against the
  allow-list, custom and opaque object constants are refused, and each ``expr_str`` must be an arithmetic
  expression over symbols and sympy functions (no attribute access, strings, subscripts or lower-case
  names other than shape symbols such as ``s0``).

A pickle is checked by walking its opcodes with ``pickletools`` (which executes nothing): every GLOBAL,
STACK_GLOBAL and INST it names must be in the allow-list; a stream that stops parsing is judged on the
opcodes before that point (the unpickler would have run those and no more). Anything else — a bare
``state_dict``, ``torch.save(model)``, a checkpoint dict, a pickle that would run code — is refused with one
line saying what it is; a pickle made only of tensors and containers is described by reading it with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import io
import json
import pickletools
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from pegasus.errors import PegasusError
from pegasus.fileio import require_file

HOW_TO_SAVE = ("save the model as TorchScript (torch.jit.save(torch.jit.trace(model, example), 'm.pt')) or as a "
               "torch.export program (torch.export.save(torch.export.export(model, (example,)), 'm.pt2'))")

#: globals a weights-only pickle may name: tensor and storage rebuilding, containers, dtypes
#: (``_rebuild_from_type_v2`` rebuilds a tensor that carries Python attributes, such as the ``_dynamo_*_indices``
#: sets and ``_DimRange`` records, a frozen dataclass of three ints, that ``torch._dynamo.mark_dynamic`` or an export
#: attempt leave on a sample input: it calls the rebuild function and the type it is given, both globals checked
#: here too, then sets the attributes)
_TENSOR_GLOBALS = re.compile(
    r"(collections\.OrderedDict|torch\._utils\._rebuild_(tensor|tensor_v2|tensor_v3|parameter|parameter_with_state)"
    r"|torch\._tensor\._rebuild_from_type_v2|torch\.Tensor|torch\.nn\.parameter\.Parameter"
    r"|torch\._dynamo\.decorators\._DimRange"
    r"|torch\.(storage\.)?\w*Storage|torch\.Size|torch\.device|(__builtin__|builtins)\.(set|frozenset|complex)"
    r"|torch\.(u?int(8|16|32|64)|float(16|32|64)|bfloat16|half|double|long|short|bool|complex(64|128)))")
#: and in a TorchScript archive also its own classes and the TorchScript unpickler's helpers
_TORCHSCRIPT_GLOBALS = re.compile(r"__torch__(\.\w+)+|torch\.jit\._pickle\.\w+")
_PICKLE_HEADS = (b"\x80", b"(", b"c", b"}", b"]", b"N")  # protocol 2+ or the usual first opcodes of 0/1


@dataclass(frozen=True)
class ModelFile:
    """A file that passed the guard: ``kind`` is 'torchscript' or 'export'."""

    path: Path
    kind: str


_MARK = object()
_STRING_PUSHES = {"STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE",
                  "BINUNICODE8"}


def _globals_of_one(stream: io.BytesIO, found: list[str]) -> None:
    """Append the globals one pickle looks up. The unpickler's stack is followed as far as strings go (string
    pushes, the memo, every op's stack effect from ``pickletools``' opcode table), so STACK_GLOBAL is judged on
    the module and name it really pops, however they were put there."""
    stack: list = []
    memo: dict = {}
    for opcode, arg, _ in pickletools.genops(stream):
        name = opcode.name
        if name in ("GLOBAL", "INST"):
            found.append(str(arg).replace(" ", "."))
        elif name.startswith("EXT"):  # copyreg's extension registry: a global by number
            found.append(f"copyreg extension {arg}")
        if name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
            memo[arg if name != "MEMOIZE" else len(memo)] = stack[-1] if stack else None
            continue
        if name == "DUP":
            stack.append(stack[-1] if stack else None)
            continue
        popped = _pop(stack, opcode.stack_before)
        if name == "STACK_GLOBAL":
            module, attribute = (popped + [None, None])[:2]
            found.append(f"{module}.{attribute}" if isinstance(module, str) and isinstance(attribute, str) else
                         "an unknown global (STACK_GLOBAL of values that are not plain strings)")
        value = arg if name in _STRING_PUSHES else memo.get(arg) if name in ("GET", "BINGET", "LONG_BINGET") else None
        stack.extend(_MARK if item is pickletools.markobject else value for item in opcode.stack_after)


def _pop(stack: list, before: list) -> list:
    """Pop what an opcode consumes; returns the popped values in stack order."""
    if pickletools.stackslice in before:  # everything down to the mark, then what lies under it
        index = len(stack) - 1 - stack[::-1].index(_MARK) if _MARK in stack else 0
        popped, stack[index:] = stack[index + 1:], []
        below = before.index(pickletools.markobject)
        if below:
            popped, stack[-below:] = stack[-below:] + popped, []
        return popped
    count = len(before)
    popped = stack[len(stack) - count:] if count else []
    del stack[len(stack) - count:]
    return popped


def pickle_globals(data: bytes) -> list[str]:
    """The globals (``module.name``) the pickles in ``data`` would look up, in order, read without running them.

    Several pickles one after another (torch's legacy format) are all read; parsing stops at the first
    bytes that are not a pickle, as the unpickler would."""
    found: list[str] = []
    stream = io.BytesIO(data)
    while stream.tell() < len(data):
        start = stream.tell()
        try:
            _globals_of_one(stream, found)
        except (ValueError, EOFError, UnicodeDecodeError, IndexError):
            break
        if stream.tell() == start:
            break
    return found


def _forbidden(globals_: list[str], torchscript: bool) -> list[str]:
    return [g for g in globals_ if not _TENSOR_GLOBALS.fullmatch(g)
            and not (torchscript and _TORCHSCRIPT_GLOBALS.fullmatch(g))]


def _looks_like_pickle(data: bytes) -> bool:
    return data[:1] in _PICKLE_HEADS


def _is_zip(data: bytes) -> bool:
    return data[:4] == b"PK\x03\x04"


def _check_pickle(data: bytes, where: str, torchscript: bool = False) -> None:
    """Refuse ``data`` (a pickle, or a torch.save zip holding them) if it names a global off the allow-list."""
    if _is_zip(data):
        try:
            inner = zipfile.ZipFile(io.BytesIO(data))
        except zipfile.BadZipFile as exc:
            raise PegasusError(f"{where} is a damaged zip archive ({exc})") from None
        for name in inner.namelist():
            if name.endswith(".pkl"):
                _check_pickle(inner.read(name), f"{where}/{name}", torchscript)
        return
    bad = _forbidden(pickle_globals(data), torchscript)
    if bad:
        raise PegasusError(f"{where} is a pickle that would call {bad[0]} when loaded (refused; nothing in it was "
                           f"run): pegasus reads tensors only")


def _members(archive: zipfile.ZipFile) -> tuple[str, dict[str, str]]:
    """The archive's top folder and its members by path below it (torch writes everything in one folder)."""
    names = [n for n in archive.namelist() if not n.endswith("/")]
    prefix = names[0].split("/", 1)[0] + "/" if names and "/" in names[0] else ""
    return prefix, {n[len(prefix):] if n.startswith(prefix) else n: n for n in names}


def inspect_model(path: str | Path) -> ModelFile:
    """Classify ``path`` and run the guard; raise a one-line PegasusError for anything pegasus will not read."""
    path = require_file(path, "PyTorch model")
    data = path.read_bytes()
    if not data:
        raise PegasusError("empty file (0 bytes), not a PyTorch model", where=str(path))
    if not _is_zip(data):
        if _looks_like_pickle(data):
            raise PegasusError(f"{describe_pickle(data, None)}, not a model: {HOW_TO_SAVE}", where=str(path))
        raise PegasusError("not a PyTorch model (neither a TorchScript or torch.export zip archive nor a pickle)",
                           where=str(path))
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        damaged = archive.testzip()
    except (zipfile.BadZipFile, EOFError, OSError) as exc:
        raise PegasusError(f"truncated or damaged zip archive ({exc}); save the model again", where=str(path)) from None
    if damaged is not None:
        raise PegasusError(f"damaged zip archive (member {damaged} fails its checksum)", where=str(path))
    _, members = _members(archive)
    if "archive_format" in members and archive.read(members["archive_format"]).strip() == b"pt2":
        _guard_export(archive, members, path)
        return ModelFile(path, "export")
    if "constants.pkl" in members and any(m.startswith("code/") for m in members):
        _guard_torchscript(archive, members, path)
        return ModelFile(path, "torchscript")
    if "data.pkl" in members:
        raise PegasusError(f"{describe_pickle(archive.read(members['data.pkl']), path)}, not a model: {HOW_TO_SAVE}",
                           where=str(path))
    raise PegasusError("a zip archive that is neither TorchScript (code/, constants.pkl) nor a torch.export program "
                       "(archive_format pt2)", where=str(path))


def _guard_torchscript(archive: zipfile.ZipFile, members: dict[str, str], path: Path) -> None:
    for member, full in members.items():
        if member.endswith(".pkl") or member.endswith(".debug_pkl"):
            _check_pickle(archive.read(full), f"{path}: {member}", torchscript=True)
        elif member.startswith("code/") and member.endswith(".py"):
            if re.search(rb"\bdef\s+__setstate__\b", archive.read(full)):
                raise PegasusError(f"{member} defines __setstate__, TorchScript code that loading the archive would "
                                   "run: refused (a float model's archive has none)", where=str(path))


_SYMBOL = re.compile(r"[a-z]{1,3}\d+")
_SYMBOL_CALL = re.compile(r"Symbol\(\s*(['\"])[a-z]{1,3}\d+\1(\s*,\s*(positive|integer|nonnegative|real|finite)\s*=\s*"
                          r"(True|False))*\s*\)")
_EXPR_CHARS = re.compile(r"[\w\s+\-*/%(),.<>=!&|~^]*")


def safe_sym_expr(text: str) -> bool:
    """Whether a symbolic-shape expression is plain arithmetic that ``sympy.sympify`` can evaluate harmlessly:
    numbers, shape symbols (``s0``, ``u12``, ``Symbol('s77', positive=True, integer=True)``), capitalised
    names (sympy/torch functions such as ``Max``, ``FloorDiv``; no Python builtin callable with side effects
    is capitalised), operators and parentheses."""
    text = _SYMBOL_CALL.sub("s0", text)  # Symbol('s77', positive=True, integer=True): a named shape symbol
    if not _EXPR_CHARS.fullmatch(text) or "__" in text or re.search(r"\.\s*[A-Za-z_]", text):
        return False
    names = re.findall(r"\b[A-Za-z_]\w*", text)
    return all(_SYMBOL.fullmatch(n) or n[0].isupper() for n in names)


def _expressions(tree) -> list[str]:
    if isinstance(tree, dict):
        found = [tree["expr_str"]] if isinstance(tree.get("expr_str"), str) else []
        return found + [e for key, value in tree.items() if key != "expr_str" for e in _expressions(value)]
    if isinstance(tree, list):
        return [e for item in tree for e in _expressions(item)]
    return []


def _guard_export(archive: zipfile.ZipFile, members: dict[str, str], path: Path) -> None:
    for member, full in members.items():
        where = f"{path}: {member}"
        base = member.rsplit("/", 1)[-1]
        if member.startswith("data/constants/") and base.startswith(("custom_obj_", "opaque_obj_")):
            raise PegasusError(f"{member} is a pickled Python object constant, which torch.export.load would "
                               "unpickle: refused (a model's constants are tensors)", where=str(path))
        data = archive.read(full)
        if member.endswith(".json"):
            try:
                tree = json.loads(data)
            except (ValueError, UnicodeDecodeError) as exc:
                raise PegasusError(f"{member} is not valid JSON ({exc})", where=str(path)) from None
            bad = [e for e in _expressions(tree) if not safe_sym_expr(e)]
            if bad:
                raise PegasusError(f"{member}: symbolic shape expression {bad[0][:60]!r} is not plain arithmetic "
                                   "(torch.export.load would evaluate it as Python): refused", where=str(path))
            if member.endswith("_config.json"):
                for entry in (tree.get("config") or {}).values():
                    if isinstance(entry, dict) and entry.get("use_pickle"):
                        folder = member.rsplit("/", 1)[0]
                        inner = members.get(f"{folder}/{entry.get('path_name')}")
                        if inner is not None:
                            _check_pickle(archive.read(inner), f"{path}: {folder}/{entry.get('path_name')}")
        elif member.startswith("data/sample_inputs/") or member.endswith((".pt", ".pkl")):
            _check_pickle(data, where)


def _summary(obj) -> str:
    """What a weights-only pickle holds, in a few words."""
    import torch

    if isinstance(obj, torch.Tensor):
        return f"a tensor of shape {list(obj.shape)}"
    if isinstance(obj, dict):
        tensors = sum(isinstance(v, torch.Tensor) for v in obj.values())
        if obj and tensors == len(obj):
            return f"a state_dict of {tensors} tensors"
        keys = ", ".join(str(k) for k in list(obj)[:6]) + (", ..." if len(obj) > 6 else "")
        kind = "a checkpoint dict" if any("state_dict" in str(k) or str(k) == "model" for k in obj) else "a dict"
        return f"{kind} (keys: {keys})"
    if isinstance(obj, (list, tuple)):
        return f"a pickled {type(obj).__name__} of {len(obj)} items"
    return f"a pickled {type(obj).__name__}"


def describe_pickle(data: bytes, zipped: Path | None) -> str:
    """One phrase for a pickle (``data`` is the ``data.pkl`` of the torch.save zip ``zipped`` when given): its
    globals are checked first, and only a pickle of tensors and containers is read (weights_only)."""
    globals_ = pickle_globals(data)
    bad = _forbidden(globals_, torchscript=False)
    if any(g.startswith("torch.nn.modules.") for g in bad):
        return f"a whole module pickled with torch.save(model) (class {bad[0]}; refused, nothing in it was run)"
    if bad:
        return f"a pickle that would call {bad[0]} when loaded (refused, nothing in it was run)"
    import torch

    try:
        obj = torch.load(str(zipped) if zipped else io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:  # a damaged or foreign pickle: torch says why
        return f"a pickle torch cannot read ({type(exc).__name__})"
    return _summary(obj)

