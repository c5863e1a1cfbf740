"""Crafted torch.export archives (.pt2): every one is regenerated here from a genuine ``torch.export.save`` file
and imported under an address-space limit. pegasus reads the archive as data, so a payload never runs (no
canary), and each structural trick (member names, zip headers, malformed JSON, huge declared tensors) is a
one-line refusal with exit 2; where the payload sits in a part pegasus never reads (sample inputs, an
unreferenced constant), the import succeeds (exit 0) and still nothing runs. The structural test imports
genuine archives (current, legacy and torch 2.7 layouts, pickled weights) in this process with torch's and
Python's loaders patched to fail, and checks the result against torch's own output."""

from __future__ import annotations

import io
import json
import struct
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.security.harness import assert_no_canary, assert_refused, run_many
from tests.support.requirements import need_module

torch = need_module("torch")
nn = torch.nn


class _Net(nn.Module):
    """Conv, BatchNorm, Linear and a lifted tensor constant: weights, buffers and constants all present."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x))).mean((2, 3))
        return self.fc(y) + torch.tensor([0.5, -0.5])


def _export(dynamic: bool = False):
    torch.manual_seed(0)
    model = _Net().eval()
    x = torch.randn(2, 3, 8, 8)
    shapes = ({0: torch.export.Dim("batch", min=2, max=64)},) if dynamic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model, x, torch.export.export(model, (x,), dynamic_shapes=shapes)


def _members(path: Path) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(path) as archive:
        return [(info.filename, archive.read(info)) for info in archive.infolist()]


def _write(path: Path, members: list[tuple[str | zipfile.ZipInfo, bytes]]) -> Path:
    with warnings.catch_warnings(), zipfile.ZipFile(path, "w") as archive:
        warnings.simplefilter("ignore")  # duplicate names are the point of one case
        for name, data in members:
            archive.writestr(name if isinstance(name, zipfile.ZipInfo) else zipfile.ZipInfo(name), data)
    return path


def _edit(source: Path, target: Path, changes: dict[str, bytes] | None = None, extra=()) -> Path:
    """``source`` with members (named below its top folder) replaced, and ``extra`` members appended (named below
    the top folder too, or a ZipInfo taken as it is)."""
    members = _members(source)
    top = members[0][0].split("/", 1)[0]
    changes = changes or {}
    out = [(name, changes.get(name[len(top) + 1:], data)) for name, data in members]
    return _write(target, out + [(n if isinstance(n, zipfile.ZipInfo) else f"{top}/{n}", d) for n, d in extra])


def _json_of(path: Path, member: str) -> dict:
    return json.loads(dict((n.split("/", 1)[1], d) for n, d in _members(path))[member])


def _posix_pickle(command: str, lead: bytes = b"") -> bytes:
    """A protocol-0 pickle calling posix.system(command) (written by hand: nothing here is unpickled)."""
    return lead + b"cposix\nsystem\n(V" + command.encode() + b"\ntR."


def _torch_save_with(pickle_bytes: bytes) -> bytes:
    """A torch.save zip whose data.pkl is ``pickle_bytes``."""
    buffer = io.BytesIO()
    torch.save(torch.zeros(2), buffer)
    members = _members(io.BytesIO(buffer.getvalue()))
    top = members[0][0].split("/", 1)[0]
    out = io.BytesIO()
    _write(out, [(n, pickle_bytes if n == f"{top}/data.pkl" else d) for n, d in members])
    return out.getvalue()


def _top(path: Path) -> str:
    return _members(path)[0][0].split("/", 1)[0]


def _fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if c.isalpha() else c for c in text)


def _patch_header(path: Path, member: str, fmt: str, local_at: int, central_at: int, value: int) -> Path:
    """Write ``value`` at the same field of ``member``'s local header and central-directory entry."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith(member))
        start_dir = archive.start_dir
    struct.pack_into(fmt, data, info.header_offset + local_at, value)
    central = data.index(b"PK\x01\x02", start_dir)
    while data[central + 46:central + 46 + len(info.filename)] != info.filename.encode():
        central = data.index(b"PK\x01\x02", central + 4)
    struct.pack_into(fmt, data, central + central_at, value)
    path.write_bytes(bytes(data))
    return path


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    """(folder, {case: (path, expected exit, words in the refusal)})."""
    folder = tmp_path_factory.mktemp("pt2")
    base, dyn = folder / "base.pt2", folder / "base_dyn.pt2"
    torch.export.save(_export()[2], str(base))
    torch.export.save(_export(dynamic=True)[2], str(dyn))
    canary = lambda case: f"touch {folder}/PWNED_{case}"  # noqa: E731
    weights = _json_of(base, "data/weights/model_weights_config.json")
    constants = _json_of(base, "data/constants/model_constants_config.json")
    cases = {}

    def case(name, path, code, *words):
        cases[name] = (path, code, words)

    # 1. full-width letters in a shape expression (sympy would normalise and evaluate them)
    program = _json_of(dyn, "models/model.json")
    code = f"__import__('os').system({canary('sym')!r})"  # spelt one character at a time: no ASCII name in it
    char = "S(CHR." + _fullwidth("name") + "." + _fullwidth("lower") + "())"
    program["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0]["as_expr"]["expr_str"] = \
        "S(" + "+".join(f"{char}({ord(c)})" for c in code) + ")"
    case("sym", _edit(dyn, folder / "sym.pt2", {"models/model.json": json.dumps(program).encode()}), 2,
         "not plain arithmetic")
    # 2. sample inputs that pickletools cannot parse but the C unpickler runs: never read, import works
    bad_inputs = _torch_save_with(_posix_pickle(canary("int"), lead=b"I0x1\n0"))
    case("int", _edit(base, folder / "int.pt2", {"data/sample_inputs/model.pt": bad_inputs}), 0)
    # 3. an opaque-object constant whose member name climbs out ('opaque_obj_/../x')
    raw = _posix_pickle(canary("opaque"))
    evil = dict(constants["config"]["lifted_tensor_0"], path_name="opaque_obj_/../x", use_pickle=False)
    evil["tensor_meta"] = dict(evil["tensor_meta"], dtype=1, sizes=[{"as_int": len(raw)}], strides=[{"as_int": 1}])
    opaque = {"config": {**constants["config"], "evil": evil}}
    case("opaque", _edit(base, folder / "opaque.pt2", {"data/constants/model_constants_config.json":
                                                       json.dumps(opaque).encode()},
                         [("data/constants/opaque_obj_/../x", raw)]), 2, "'..'")
    raw = _posix_pickle(canary("unused"))
    # 3b. the same path on a constant the program uses, the member itself absent
    used = {"config": {"lifted_tensor_0": evil}}
    case("opaque_used", _edit(base, folder / "opaque_used.pt2", {"data/constants/model_constants_config.json":
                                                                 json.dumps(used).encode()}), 2,
         "pickled Python object")
    climb = {"config": {"lifted_tensor_0": dict(evil, path_name="tensor_0/../../weights/weight_0")}}
    case("climb", _edit(base, folder / "climb.pt2", {"data/constants/model_constants_config.json":
                                                     json.dumps(climb).encode()}), 2, "not a plain relative path")
    # 3c. an unreferenced opaque constant in a clean member: never read, import works
    unused = {"config": {**constants["config"], "evil": dict(evil, path_name="opaque_obj_0", use_pickle=True)}}
    case("opaque_unused", _edit(base, folder / "opaque_unused.pt2", {"data/constants/model_constants_config.json":
                                                                     json.dumps(unused).encode()},
                                [("data/constants/opaque_obj_0", raw)]), 0)
    # 4. an absolute weight path (torch joins it to '/evil'); the archive also holds '<top>//evil'
    absolute = json.loads(json.dumps(weights))
    absolute["config"]["fc.weight"] = {"path_name": "/evil", "is_param": True, "use_pickle": True, "tensor_meta": None}
    raw = _posix_pickle(canary("abs"))
    case("abs", _edit(base, folder / "abs.pt2", {"data/weights/model_weights_config.json":
                                                 json.dumps(absolute).encode()},
                      [("/evil", _torch_save_with(raw))]), 2, "zip member")
    case("abs_config", _edit(base, folder / "abs_config.pt2", {"data/weights/model_weights_config.json":
                                                               json.dumps(absolute).encode()}), 2,
         "not a plain relative path")
    # 5. a second program models/a/b.json (torch resolves its weights elsewhere than a guard would)
    second = json.loads(json.dumps(weights))
    second["config"]["fc.weight"] = {"path_name": "evil", "is_param": True, "use_pickle": True, "tensor_meta": None}
    case("subprog", _edit(base, folder / "subprog.pt2", extra=[
        ("models/a/b.json", json.dumps(_json_of(base, "models/model.json")).encode()),
        ("data/constants/a/b_constants_config.json", json.dumps(constants).encode()),
        ("data/weights/a/b_weights_config.json", json.dumps(second).encode()),
        ("data/sample_inputs/a/b.pt", dict(_members(base))[f"{_top(base)}/data/sample_inputs/model.pt"]),
        ("data/weights/evil", _torch_save_with(_posix_pickle(canary("subprog"))))]), 2, "one program")
    # 6. zip member tricks
    members = _members(base)
    case("dir_first", _write(folder / "dir_first.pt2", [(zipfile.ZipInfo("evil/"), b"")] + members), 2,
         "directory entry")
    case("duplicate", _write(folder / "duplicate.pt2", members + [members[0]]), 2, "listed twice")
    case("backslash", _edit(base, folder / "backslash.pt2", extra=[("a\\..\\x", b"")]), 2, "backslash")
    case("absolute_member", _edit(base, folder / "absolute_member.pt2", extra=[(zipfile.ZipInfo("/etc/x"), b"")]), 2,
         "absolute path")
    disagree = bytearray(base.read_bytes())
    first = members[0][0].encode()
    disagree[disagree.index(first):disagree.index(first) + len(first)] = first[:-1] + b"X"
    (folder / "disagree.pt2").write_bytes(bytes(disagree))
    case("disagree", folder / "disagree.pt2", 2, "disagree")
    case("encrypted", _patch_header(_edit(base, folder / "encrypted.pt2"), "data/weights/weight_0", "<H", 6, 8, 1),
         2, "encrypted")
    case("huge_member", _patch_header(_edit(base, folder / "huge_member.pt2"), "data/weights/weight_0", "<L", 22, 24,
                                      2**32 - 16), 2, "declares")
    # 7. malformed JSON where objects are expected (were AttributeError before)
    case("config_list", _edit(base, folder / "config_list.pt2", {"data/weights/model_weights_config.json": b"[]"}),
         2, "not an object")
    case("config_string", _edit(base, folder / "config_string.pt2", {"data/weights/model_weights_config.json":
                                                                     b'{"config": "oops"}'}), 2, "not an object")
    broken = dict(program, graph_module=[])
    case("module_list", _edit(base, folder / "module_list.pt2", {"models/model.json": json.dumps(broken).encode()}),
         2, "graph_module")
    # 8. a weight declaring 2^32 elements of a 16-byte storage, and one whose strides leave its storage
    huge = json.loads(json.dumps(weights))
    meta = huge["config"]["fc.weight"]["tensor_meta"]
    meta["sizes"], meta["strides"] = [{"as_int": 2**16}, {"as_int": 2**16}], [{"as_int": 2**16}, {"as_int": 1}]
    case("huge_tensor", _edit(base, folder / "huge_tensor.pt2", {"data/weights/model_weights_config.json":
                                                                 json.dumps(huge).encode()}), 2, "allowed for one")
    outside = json.loads(json.dumps(weights))
    outside["config"]["fc.weight"]["tensor_meta"]["storage_offset"] = {"as_int": 1000}
    case("strides_outside", _edit(base, folder / "outside.pt2", {"data/weights/model_weights_config.json":
                                                                 json.dumps(outside).encode()}), 2, "past the")
    # 9. a pickled weight (use_pickle) whose pickle would call posix.system
    pickled = json.loads(json.dumps(weights))
    pickled["config"]["fc.weight"].update(path_name="weight_x", use_pickle=True)
    raw = _posix_pickle(canary("pickled_weight"))
    case("pickled_weight", _edit(base, folder / "pickled_weight.pt2", {"data/weights/model_weights_config.json":
                                                                       json.dumps(pickled).encode()},
                                 [("data/weights/weight_x", _torch_save_with(raw))]), 2, "would call posix.system")
    return folder, cases


def test_crafted_archives(crafted):
    folder, cases = crafted
    argv = [["import", "pytorch", "--model", path, "--output-model", folder / "out" / f"{name}.json"]
            for name, (path, _, _) in cases.items()]
    results = run_many(argv, cwd=folder)
    for (name, (_, code, words)), result in zip(cases.items(), results):
        if code == 2:
            assert result.code == 2, (name, result.stderr[-2000:])
            assert_refused(result, *words)
        else:
            assert result.code == 0, (name, result.stderr[-2000:])
    assert_no_canary(folder)


def _run_pegasus(path: Path, x: np.ndarray) -> np.ndarray:
    from pegasus.importers.pytorch.loader import import_pytorch
    from pegasus.runtime.interpreter import run

    graph = import_pytorch(path)
    return run(graph, {graph.inputs[0]: x})[graph.outputs[0]]


def _legacy_layouts(folder: Path, base: Path, model, program) -> list[Path]:
    """The same program with its weights as one pickled state_dict (data/weights/model.pt) and in torch 2.7's
    layout (serialized_exported_program.json beside serialized_state_dict.pt)."""
    from torch._export.serde.serialize import serialize

    def saved(value) -> bytes:
        buffer = io.BytesIO()
        torch.save(value, buffer)
        return buffer.getvalue()

    members = [(n, d) for n, d in _members(base) if "/data/weights/" not in n and "/data/constants/" not in n]
    top = members[0][0].split("/", 1)[0]
    legacy = _write(folder / "legacy.pt2", members + [(f"{top}/data/weights/model.pt", saved(program.state_dict)),
                                                      (f"{top}/data/constants/model.pt", saved(program.constants))])
    artifact = serialize(program)
    old = _write(folder / "old27.pt2", [("serialized_exported_program.json", artifact.exported_program),
                                        ("serialized_state_dict.pt", artifact.state_dict),
                                        ("serialized_constants.pt", artifact.constants),
                                        ("serialized_example_inputs.pt", artifact.example_inputs),
                                        ("version", b"8.0")])
    weights = _json_of(base, "data/weights/model_weights_config.json")
    weights["config"]["fc.weight"].update(path_name="weight_pickled", use_pickle=True)
    pickled = _edit(base, folder / "pickled.pt2", {"data/weights/model_weights_config.json":
                                                   json.dumps(weights).encode()},
                    [("data/weights/weight_pickled", saved(model.fc.weight.detach().clone()))])
    return [legacy, old, pickled]


def test_no_loader_runs_and_output_matches_torch(tmp_path, monkeypatch):
    import _pickle
    import pickle

    model, x, program = _export()
    _, _, dyn_program = _export(dynamic=True)
    base, dyn = tmp_path / "base.pt2", tmp_path / "dyn.pt2"
    torch.export.save(program, str(base))
    torch.export.save(dyn_program, str(dyn))
    paths = [base, dyn, *_legacy_layouts(tmp_path, base, model, program)]
    with torch.no_grad():
        expected = model(x).numpy()
    import pegasus.importers.pytorch.ops  # noqa: F401  (torch's modules imported before the patching)

    def refuse(*args, **kwargs):
        raise AssertionError("an executing loader was called on model bytes")

    for owner, name in ((torch.export, "load"), (torch, "load"), (torch.jit, "load"), (pickle, "load"),
                        (pickle, "loads"), (pickle, "Unpickler"), (_pickle, "Unpickler"), (_pickle, "load"),
                        (_pickle, "loads")):
        monkeypatch.setattr(owner, name, refuse)
    for path in paths:
        batch = 1 if path == dyn else len(x)  # a symbolic batch imports as 1
        got = _run_pegasus(path, x[:batch].numpy())
        np.testing.assert_allclose(got, expected[:batch], rtol=1e-4, atol=1e-5, err_msg=path.name)
