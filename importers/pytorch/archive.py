"""What a PyTorch file is, found without running anything in it.

PyTorch files are zip archives or pickles, and Python's unpickler calls whatever global a pickle names
(``os.system`` as easily as ``torch._utils._rebuild_tensor_v2``). pegasus reads two kinds of file:

- a torch.export program (``torch.export.save``, ``.pt2``): read entirely as data by exported.py (JSON program,
  raw or tensor-only-pickled weights); no torch loader ever sees it.
- a TorchScript archive (``torch.jit.save``), read by torchscript.py. Its pickles (``data.pkl``,
  ``constants.pkl``, ``*.debug_pkl``) are first checked here: tensor_pickle.py lists the globals each names
  (walking the opcodes, calling nothing; a malformed pickle is refused) and every one must be a tensor rebuild,
  a container, a TorchScript class of the archive or one of its unpickler's helpers; an archive whose code
  defines ``__setstate__`` is refused.

Every archive is opened through pegasus/safezip.py (member names, duplicates, local/central headers, sizes).
Anything else — a bare ``state_dict``, ``torch.save(model)``, a checkpoint dict, a pickle that would run code —
is refused with one line saying what it is, found by reading it with tensor_pickle.py (never torch.load).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pegasus.errors import PegasusError
from pegasus.fileio import require_file
from pegasus.importers.pytorch import tensor_pickle
from pegasus.importers.pytorch.tensor_pickle import PickledTensor, PickleRefused
from pegasus.safezip import Archive, open_archive

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
#: a bare pickle is described from its first bytes (the objects; storages follow them in old torch.save files)
_DESCRIBE_BYTES = 16 * 2**20
#: the first pickle of a torch.save file written before torch 1.6
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


@dataclass(frozen=True)
class ModelFile:
    """A file that passed the guard: ``kind`` is 'torchscript' or 'export'."""

    path: Path
    kind: str


def pickle_globals(data: bytes, where: str = "pickle", whole: bool = True) -> list[str]:
    """The globals (``module.name``) the pickles in ``data`` name, in order, found without calling anything.
    Several pickles one after another (old torch.save files) are all read; bytes that do not parse are refused,
    or, with ``whole`` False, end the list (the storages that follow the pickles of an old torch.save file)."""
    found: list[str] = []
    start = 0
    while start < len(data):
        try:
            names, start = tensor_pickle.scan(data, where, start)
        except PickleRefused:
            if whole or not found and start == 0:
                raise
            break
        found.extend(names)
    return found


def _forbidden(globals_: list[str]) -> list[str]:
    return [g for g in globals_ if not _TENSOR_GLOBALS.fullmatch(g) and not _TORCHSCRIPT_GLOBALS.fullmatch(g)]


def _check_pickle(data: bytes, where: str) -> None:
    """Refuse a TorchScript pickle that names a global off the allow-list, or that cannot be parsed."""
    bad = _forbidden(pickle_globals(data, where))
    if bad:
        raise PegasusError(f"{where} is a pickle that would call {bad[0]} when loaded (refused; nothing in it was "
                           f"run): pegasus reads tensors only")


def inspect_model(path: str | Path) -> ModelFile:
    """Classify ``path`` and run the guard; raise a one-line PegasusError for anything pegasus will not read."""
    path = require_file(path, "PyTorch model")
    with open(path, "rb") as stream:
        head = stream.read(_DESCRIBE_BYTES)
    if not head:
        raise PegasusError("empty file (0 bytes), not a PyTorch model", where=str(path))
    if head[:4] != b"PK\x03\x04":
        if head[:1] in _PICKLE_HEADS:
            raise PegasusError(f"{describe_pickle(head, str(path))}, not a model: {HOW_TO_SAVE}", where=str(path))
        raise PegasusError("not a PyTorch model (neither a TorchScript or torch.export zip archive nor a pickle)",
                           where=str(path))
    with open_archive(path) as archive:
        members = {archive.relative(n): n for n in archive.names}
        if "archive_format" in members and archive.read(members["archive_format"], "archive_format").strip() == b"pt2":
            return ModelFile(path, "export")
        if archive.has("serialized_exported_program.json"):  # torch 2.7's layout
            return ModelFile(path, "export")
        if "constants.pkl" in members and any(m.startswith("code/") for m in members):
            _guard_torchscript(archive, members, path)
            return ModelFile(path, "torchscript")
        if "data.pkl" in members:
            what = describe_pickle(archive.read(members["data.pkl"], "data.pkl"), f"{path}: data.pkl")
            raise PegasusError(f"{what}, not a model: {HOW_TO_SAVE}", where=str(path))
    raise PegasusError("a zip archive that is neither TorchScript (code/, constants.pkl) nor a torch.export program "
                       "(archive_format pt2)", where=str(path))


def _guard_torchscript(archive: Archive, members: dict[str, str], path: Path) -> None:
    for member, full in members.items():
        if member.endswith(".pkl") or member.endswith(".debug_pkl"):
            _check_pickle(archive.read(full, member), f"{path}: {member}")
        elif member.startswith("code/") and member.endswith(".py"):
            if re.search(rb"\bdef\s+__setstate__\b", archive.read(full, member)):
                raise PegasusError(f"{member} defines __setstate__, TorchScript code that loading the archive would "
                                   "run: refused (a float model's archive has none)", where=str(path))


def _summary(obj) -> str:
    """What a pickle of tensors and containers holds, in a few words."""
    if isinstance(obj, PickledTensor):
        return f"a tensor of shape {list(obj.shape)}"
    if isinstance(obj, dict):
        tensors = sum(isinstance(v, PickledTensor) for v in obj.values())
        if obj and tensors == len(obj):
            return f"a state_dict of {tensors} tensors"
        keys = ", ".join(str(k) for k in list(obj)[:6]) + (", ..." if len(obj) > 6 else "")
        kind = "a checkpoint dict" if any("state_dict" in str(k) or str(k) == "model" for k in obj) else "a dict"
        return f"{kind} (keys: {keys})"
    if isinstance(obj, (list, tuple)):
        return f"a pickled {type(obj).__name__} of {len(obj)} items"
    return f"a pickled {type(obj).__name__}"


def describe_pickle(data: bytes, where: str) -> str:
    """One phrase for a pickle (a bare file's first bytes, or a torch.save zip's ``data.pkl``), read with the
    tensor-only reader; for a refused one, the globals it names say what it is."""
    try:
        value, end = tensor_pickle.load_prefix(data, where)
        if value == _LEGACY_MAGIC and type(value) is int:  # magic, protocol version, sys info, then the object
            for _ in range(3):
                value, end = tensor_pickle.load_prefix(data, where, end)
        return _summary(value)
    except PickleRefused as exc:
        if exc.global_name is None:
            return f"a pickle pegasus cannot read ({exc.message.split(' (at byte')[0]})"
        first = exc.global_name
    try:
        bad = [g for g in pickle_globals(data, where, whole=False) if not tensor_pickle.is_tensor_global(g)] or [first]
    except PickleRefused:
        bad = [first]
    if any(g.startswith("torch.nn.modules.") for g in bad):
        return f"a whole module pickled with torch.save(model) (class {bad[0]}; refused, nothing in it was run)"
    return f"a pickle that would call {bad[0]} when loaded (refused, nothing in it was run)"
