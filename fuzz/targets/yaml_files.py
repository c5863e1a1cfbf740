"""The YAML files pegasus reads from users: ``.quantize`` tables (read and applied as ``quantize --hybrid`` and
``inference --dtype quantized`` apply them), input meta (read and one sample fed through it), batch manifests
(parsed and checked into jobs; no job runs) and Glow ``-load-profile`` profiles (turned into a table).

The tables and profiles belong to the demo LeNet (conversion_scripts/demo/lenet_mnist.onnx), imported once per
process. Half the mutants come from ``mutate_yaml``: the document parsed, one value changed (its type, a
number made NaN/inf/huge/negative, deep nesting, an unknown or duplicated key, a key removed) and dumped."""

from __future__ import annotations

import functools
import io
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np

from fuzz.targets import target

ROOT = Path(__file__).resolve().parents[2]
LENET = ROOT / "conversion_scripts" / "demo" / "lenet_mnist.onnx"
NAME = "lenet_mnist"


@functools.cache
def lenet_files() -> tuple[Path, Path]:
    """NAME.json and NAME.data of the demo LeNet as ``pegasus import onnx`` writes them (once per process)."""
    from pegasus.importers.onnx.loader import import_onnx, load_model
    from pegasus.ir import serialize

    graph = import_onnx(load_model(str(LENET)), name=NAME, note=lambda line: None)
    folder = Path(tempfile.mkdtemp(prefix="pegasus-fuzz-lenet-"))
    text, blob = serialize.graph_to_files(graph, {"framework": "onnx", "file": LENET.name})
    (folder / f"{NAME}.json").write_text(text)
    (folder / f"{NAME}.data").write_bytes(blob)
    return folder / f"{NAME}.json", folder / f"{NAME}.data"


@functools.cache
def lenet():
    from pegasus.ir import serialize

    return serialize.load(*lenet_files())


def _sample() -> dict[str, np.ndarray]:
    graph = lenet()
    name = graph.inputs[0]
    shape = graph.type_of(name).shape
    return {name: np.random.default_rng(0).random(shape, dtype=np.float32)}


# ---- the structure-aware mutator ------------------------------------------------------------------------------

NEW_VALUES = [0, -1, -2**31, 2**31, 2**63, 10**400, 1e308, -1e308, float("nan"), float("inf"), float("-inf"), 1e-45,
              0.5, True, None, "", "x" * 300, "nchw", "float32", "dynamic_fixed_point-i16", [], {}, [1, 2, 3],
              {"a": 1}, "../../etc/passwd", "/dev/zero"]


def _places(node, out: list) -> list:
    """(container, key) of every value in the document."""
    if isinstance(node, dict):
        for key in list(node):
            out.append((node, key))
            _places(node[key], out)
    elif isinstance(node, list):
        for index in range(len(node)):
            out.append((node, index))
            _places(node[index], out)
    return out


def _nested(depth: int):
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def mutate_yaml(data: bytes, rng: random.Random) -> bytes:
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt", pure=True)
    doc = yaml.load(data.decode())
    places = _places(doc, [])
    if not places:
        raise ValueError("nothing to mutate")
    container, key = rng.choice(places)
    action = rng.randrange(7)
    value = container[key]
    if action == 0 or action == 1:
        container[key] = rng.choice(NEW_VALUES)
    elif action == 2 and isinstance(value, (int, float)) and not isinstance(value, bool):
        container[key] = rng.choice([-value, value * 2**40, value + 1, -1 - value, float(value) + 0.5, str(value)])
    elif action == 3:
        container[key] = _nested(rng.choice([5, 40, 70, 200]))
    elif action == 4 and isinstance(container, dict):
        container[f"unknown_{rng.randrange(100)}"] = rng.choice(NEW_VALUES)
    elif action == 5 and isinstance(container, dict):
        del container[key]
    elif isinstance(container, list):
        container.insert(rng.randrange(len(container) + 1), rng.choice([value, rng.choice(NEW_VALUES)]))
    else:
        container[key] = [value] * rng.choice([0, 2, 9])
    yaml.representer.ignore_aliases = lambda _: True
    stream = io.StringIO()
    yaml.dump(doc, stream)
    text = stream.getvalue()
    if rng.random() < 0.15:  # a duplicated key: ruamel refuses, the reader must say so in one line
        lines = text.splitlines(keepends=True)
        keyed = [i for i, line in enumerate(lines) if ":" in line and not line.lstrip().startswith("-")]
        if keyed:
            i = rng.choice(keyed)
            lines.insert(i + 1, lines[i])
            text = "".join(lines)
    return text.encode()


# ---- the targets -----------------------------------------------------------------------------------------------

@target("quantize_table", text=True, structured=mutate_yaml)
def read_quantize_table(path: Path, scratch: Path) -> None:
    """``quantize --hybrid`` for a table with customized layers, then (every table) ``inference --dtype
    quantized`` of one sample."""
    from pegasus.commands.quantized_model import lower_model
    from pegasus.ir import serialize
    from pegasus.quantizers import quantize_file, workflow
    from pegasus.runtime import interpreter

    graph = lenet()
    table = quantize_file.load_table(path)
    if table.customized_layers:
        json_path = scratch / f"{NAME}.json"
        shutil.copyfile(lenet_files()[0], json_path)
        shutil.copyfile(lenet_files()[1], scratch / f"{NAME}.data")
        target_path = scratch / path.name
        shutil.copyfile(path, target_path)
        options = workflow.Options(quantizer=table.quantizer, qtype=table.qtype)
        workflow.quantize_hybrid(graph, lambda g: iter([_sample()]), options, target_path, json_path)
        path = target_path  # inference then reads NAME.quantize.json with the rewritten table
        graph = serialize.load(scratch / f"{NAME}.quantize.json", scratch / f"{NAME}.data")
    lowered = lower_model(graph, str(path), show=False)
    interpreter.run(lowered.graph, _sample())


@target("inputmeta", text=True, mutable="*.yml", structured=mutate_yaml)
def read_inputmeta(path: Path, scratch: Path) -> None:
    """The input meta read, and its first sample fed as inference and calibration read it."""
    from pegasus.runtime import samples
    from pegasus.runtime.inputmeta import load_input_meta

    meta = load_input_meta(next(path.glob("*.yml")))
    for feeds in samples.iterate_samples(lenet(), meta, None, batch_size=1, iterations=1):
        del feeds


@target("manifest", text=True, mutable="*.yaml", structured=mutate_yaml)
def read_manifest(path: Path, scratch: Path) -> None:
    from pegasus.batch.manifest import load_manifest

    jobs = load_manifest(next(path.glob("*.yaml")), scratch / "batch_output")
    for job in jobs:
        job.digest()


@target("glow_profile", text=True, structured=mutate_yaml)
def read_glow_profile(path: Path, scratch: Path) -> None:
    """``model-compiler -load-profile``: the profile's ranges into a table (uint8, or int8 per channel with int8
    biases, by the input's size: each scheme gets half the mutants)."""
    from pegasus.commands.glow_profile import table_from_profile

    json_path, data_path = lenet_files()
    schemes = (("asymmetric_affine", "uint8", False), ("perchannel_symmetric_affine", "int8", True))
    scheme = schemes[path.stat().st_size % 2]
    table_from_profile(str(path), json_path, data_path, scheme, scratch / f"{scheme[0]}.quantize")
