"""YAML files users hand pegasus (.quantize, input meta, batch manifests, Glow profiles), the .quantize numbers,
dump file names, batch logs and the memory-plan plot, under crafted input (issue 37, items 3-4).

Every crafted file is made here from a legitimate one: the demo LeNet imported and quantized by pegasus, then
edited the way an attacker would (alias bombs, tags, absurd numbers, long names)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pegasus.batch.jobs import BoundedLog, bounded
from tests.security.harness import assert_no_canary, assert_refused, run_many

DEMO = Path(__file__).resolve().parents[2] / "conversion_scripts" / "demo"


def bomb(depth: int, item: str = "lol") -> str:
    """A flow list of nested anchors/aliases expanding to 10**(depth+1) items (a few hundred bytes)."""
    parts = [f"&l0 [{','.join([item] * 10)}]"] + [f"&l{i} [" + ",".join([f"*l{i - 1}"] * 10) + "]"
                                                   for i in range(1, depth + 1)]
    return "[" + ", ".join(parts) + "]"


@pytest.fixture(scope="module")
def lenet(demo_model, tmp_path_factory) -> Path:
    """A folder with lenet.json/.data, an input meta reading the demo dataset and lenet.quantize (pegasus's)."""
    folder = tmp_path_factory.mktemp("yamlq")
    json_path, data_path = demo_model
    (folder / "lenet.json").write_bytes(json_path.read_bytes())
    (folder / "lenet.data").write_bytes(data_path.read_bytes())
    meta = (DEMO / "lenet_mnist_inputmeta.yml").read_text()
    (folder / "meta.yml").write_text(meta.replace("path: dataset.txt", f"path: {DEMO / 'dataset.txt'}"))
    (folder / "lenet.onnx").write_bytes((DEMO / "lenet_mnist.onnx").read_bytes())
    [result] = run_many([quantize(folder, "lenet.quantize", "--rebuild")], cwd=folder)
    assert result.code == 0, result.stderr
    return folder


def quantize(folder: Path, table: str, mode: str = "--hybrid", meta: str = "meta.yml") -> list[str]:
    return ["quantize", "--model", folder / "lenet.json", "--model-data", folder / "lenet.data", "--with-input-meta",
            folder / meta, "--model-quantize", folder / table, mode]


def inference(folder: Path, table: str) -> list[str]:
    return ["inference", "--model", folder / "lenet.json", "--model-data", folder / "lenet.data", "--dtype",
            "quantized", "--model-quantize", folder / table, "--with-input-meta", folder / "meta.yml",
            "--iterations", "1", "--postprocess", "print_topn"]


def line_of(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


def test_alias_bombs_are_refused_at_their_first_anchor(lenet: Path):
    table = (lenet / "lenet.quantize").read_text()
    (lenet / "bomb.quantize").write_text(table.replace("customized_quantize_layers: {}",
                                                       f"customized_quantize_layers: {{}}\nnotes: {bomb(6, '1.5')}"))
    (lenet / "alias.quantize").write_text(table.replace("algorithm: normal", "algorithm: normal\nnote: *nowhere"))
    meta = (lenet / "meta.yml").read_text()
    (lenet / "bomb_meta.yml").write_text(meta.replace("input_meta:", f"x: {bomb(6)}\ninput_meta:"))
    (lenet / "merge_meta.yml").write_text(meta.replace("          preprocess:\n", "          preprocess:\n"
                                                                                  "            <<: *defaults\n"))
    (lenet / "manifest.yml").write_text(f"models:\n  - name: m\n    model: lenet.onnx\n    inputs: {bomb(7)}\n")
    start = time.monotonic()
    results = run_many([quantize(lenet, "bomb.quantize"), inference(lenet, "bomb.quantize"),
                        quantize(lenet, "alias.quantize"), quantize(lenet, "x.quantize", "--rebuild", "bomb_meta.yml"),
                        quantize(lenet, "x.quantize", "--rebuild", "merge_meta.yml"),
                        ["batch", lenet / "manifest.yml", "--output-dir", lenet / "batch_out"]],
                       cwd=lenet, address_space=4 * 2**30)  # the bombs alone would take 2.4 to 5.6 GB
    assert time.monotonic() - start < 60
    notes = line_of((lenet / "bomb.quantize").read_text(), "notes:")
    for result in results[:2]:
        assert_refused(result, "bomb.quantize", f"line {notes}:", "YAML anchors (&l0) are not accepted")
    assert_refused(results[2], "alias.quantize", f"line {line_of(table, 'algorithm') + 1}:",
                   "YAML aliases (*nowhere) are not accepted")
    assert_refused(results[3], "bomb_meta.yml", f"line {line_of(meta, 'input_meta:')}:", "anchors")
    assert_refused(results[4], "merge_meta.yml", "aliases (*defaults)")
    assert_refused(results[5], "manifest.yml", "line 4:", "anchors")
    assert not (lenet / "batch_out").exists() and not (lenet / "x.quantize").exists()
    assert (lenet / "bomb.quantize").read_text().count("*l5") == 10  # left as it was


def test_glow_profile_aliases_are_refused(lenet: Path, tmp_path: Path):
    (tmp_path / "profile.yml").write_text(f"format: 1\ntensors: []\nlayer_digests: {bomb(6)}\n")
    proc = subprocess.run([sys.executable, "-c", "import sys; from pegasus.commands.glow_cli import compiler_main; "
                           "sys.exit(compiler_main(sys.argv[1:]))", "-backend=CPU", f"-model={lenet / 'lenet.onnx'}",
                           "-emit-bundle=build", "-model-input=data,float,[1,1,28,28]", "-load-profile=profile.yml"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "profile.yml: line 3: YAML anchors (&l0) are not accepted" in lines[0], proc.stderr


def test_tags_deep_nesting_and_bad_meta_numbers_are_refused(lenet: Path):
    table = (lenet / "lenet.quantize").read_text()
    payload = '!!python/object/apply:os.system ["touch PWNED_yaml_tag"]'
    tagged = table.replace("    method: layer", f"    method: layer\n    evil: {payload}", 1)
    (lenet / "tag.quantize").write_text(tagged)
    (lenet / "local_tag.quantize").write_text(table.replace("qtype: u8", "qtype: !custom u8", 1))
    (lenet / "deep.quantize").write_text(table + "deep: " + "[" * 20000 + "]" * 20000 + "\n")
    meta = (lenet / "meta.yml").read_text()
    (lenet / "nan_meta.yml").write_text(meta.replace("mean: [0.0]", "mean: [.nan]"))
    (lenet / "shape_meta.yml").write_text(meta.replace("shape: [1, 1, 28, 28]", "shape: [1, 1, 28, 1e99]"))
    results = run_many([quantize(lenet, "tag.quantize"), inference(lenet, "tag.quantize"),
                        quantize(lenet, "local_tag.quantize"), quantize(lenet, "deep.quantize"),
                        quantize(lenet, "y.quantize", "--rebuild", "nan_meta.yml"),
                        quantize(lenet, "y.quantize", "--rebuild", "shape_meta.yml")], cwd=lenet)
    evil = line_of((lenet / "tag.quantize").read_text(), "evil:")
    for result in results[:2]:  # the first used to be 'internal error: TypeError' (exit 1) under --hybrid
        assert_refused(result, "tag.quantize", f"line {evil}:", "YAML tag !!python/object/apply:os.system")
    assert_refused(results[2], "local_tag.quantize", "YAML tag !custom is not accepted")
    assert_refused(results[3], "deep.quantize", "nested more than")
    assert_refused(results[4], "nan_meta.yml", "preprocess 'mean' must be a finite number")
    assert_refused(results[5], "shape_meta.yml", "shape must be a list of integers")
    assert_no_canary(lenet, Path.cwd())


#: what to change in the first tensor entry of a table -> (the key the refusal's line holds, a word of it)
NUMBERS = {
    "zero_point_inf": (("    zero_point:\n      - 0\n", "    zero_point:\n      - .inf\n"), "zero_point", "integers"),
    "zero_point_range": (("    zero_point:\n      - 0\n", "    zero_point:\n      - 300\n"), "zero_point", "[0, 255]"),
    "zero_point_fraction": (("    zero_point:\n      - 0\n", "    zero_point:\n      - 1.5\n"), "zero_point", "1.5"),
    "zero_point_text": (("    zero_point:\n      - 0\n", "    zero_point:\n      - abc\n"), "zero_point", "abc"),
    "scale_nan": (("    scale:\n      - ", "    scale:\n      - .nan\n      #"), "scale", "nan"),
    "scale_inf": (("    scale:\n      - ", "    scale:\n      - .inf\n      #"), "scale", "inf"),
    "scale_huge": (("    scale:\n      - ", "    scale:\n      - 1e308\n      #"), "scale", "1e+308"),
    "scale_negative": (("    scale:\n      - ", "    scale:\n      - -0.5\n      #"), "scale", "-0.5"),
    "scale_bool": (("    scale:\n      - ", "    scale:\n      - true\n      #"), "scale", "true"),
    "min_nan": (("    min_value:\n      - ", "    min_value:\n      - .nan\n      #"), "min_value", "nan"),
    "max_below_min": (("    max_value:\n      - ", "    max_value:\n      - -1e9\n      #"), "min_value",
                      "at most max_value"),
    "fl_absurd": (("    qtype: u8", "    fl: -5000\n    qtype: u8"), "fl", "-5000"),
    "fl_text": (("    qtype: u8", "    fl: many\n    qtype: u8"), "fl", "many"),
    "axis_absurd": (("    qtype: u8", "    axis: 100000000000000000000\n    qtype: u8"), "axis", "axis"),
}


def test_quantize_numbers_are_checked_where_the_table_is_read(lenet: Path):
    table = (lenet / "lenet.quantize").read_text()
    first = re.search(r"^  (\S+):$", table[table.index("quantize_parameters:"):], re.M).group(1)
    names = [*NUMBERS, "zero_point_inf", "fl_absurd"]  # the two cases under --hybrid too (exit 1 before)
    for name, ((old, new), _, _) in NUMBERS.items():
        text = table.replace(old, new, 1)
        assert text != table, name
        (lenet / f"{name}.quantize").write_text(text)
    cases = [inference(lenet, f"{name}.quantize") for name in NUMBERS]
    cases += [quantize(lenet, f"{name}.quantize") for name in names[len(NUMBERS):]]
    bad_maps = {"params_list": table.replace("quantize_parameters:\n", "quantize_parameters: [1, 2]\nold:\n", 1),
                "custom_list": table.replace("customized_quantize_layers: {}", "customized_quantize_layers: [a]")}
    for name, text in bad_maps.items():
        (lenet / f"{name}.quantize").write_text(text)
        cases.append(inference(lenet, f"{name}.quantize"))
    results = run_many(cases, cwd=lenet)
    for name, result in zip(names, results):
        _, key, word = NUMBERS[name]
        assert_refused(result, f"{name}.quantize", f"tensor '{first}'", key, word)
        number = int(re.search(r"line (\d+):", result.lines[0]).group(1))
        assert f"{key}:" in (lenet / f"{name}.quantize").read_text().splitlines()[number - 1], result.lines
    assert_refused(results[-2], "params_list.quantize", "line ", "quantize_parameters must be a mapping")
    assert_refused(results[-1], "custom_list.quantize", "line ", "customized_quantize_layers must be a mapping")


def test_impossible_scales_name_the_layer_and_legit_tables_still_work(lenet: Path):
    table = (lenet / "lenet.quantize").read_text()
    at = table.index("  /conv1/Conv_output_0:")
    start = table.index("scale:\n      - ", at) + len("scale:\n      - ")
    (lenet / "ratio.quantize").write_text(table[:start] + "1e-25" + table[table.index("\n", start):])
    (lenet / "kept.quantize").write_text("# my notes\n" + table)
    results = run_many([inference(lenet, "ratio.quantize"), inference(lenet, "lenet.quantize"),
                        quantize(lenet, "kept.quantize")], cwd=lenet)
    assert_refused(results[0], "ratio.quantize", "layer '/conv1/Conv' (Conv)", "requantisation factor")
    assert results[1].code == 0 and "class" in results[1].stdout, results[1].stderr
    assert results[2].code == 0, results[2].stderr
    assert (lenet / "kept.quantize").read_text().startswith("# my notes\n")


def test_dump_names_are_bounded_and_unique(tmp_path: Path):
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper

    a, b, total, other = "in/" + "x" * 300, "in:" + "x" * 300, "out" * 100, "allow_pickle"
    nodes = [helper.make_node("Add", [a, b], [total]), helper.make_node("Relu", [a], [other])]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in (a, b)]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in (total, other)]
    model = helper.make_model(helper.make_graph(nodes, "long", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, tmp_path / "long.onnx")
    x0, x1 = np.array([[1, -2, 3, -4]], np.float32), np.array([[0.5, 0.25, -8, 2]], np.float32)
    np.save(tmp_path / "s0.npy", x0)
    np.save(tmp_path / "s1.npy", x1)
    results = run_many([["import", "onnx", "--model", "long.onnx", "--output-model", "long.json", "--output-data",
                         "long.data"],
                        ["inference", "--model", "long.json", "--model-data", "long.data", "--input", "s0.npy#s1.npy",
                         "--postprocess", "dump_result", "--output-dir", "dump"]], cwd=tmp_path)
    assert [r.code for r in results] == [0, 0], results[-1].stderr  # ENAMETOOLONG (exit 1) before
    files = sorted((tmp_path / "dump").glob("*.tensor"))
    assert len(files) == 4 and all(len(f.name.encode()) <= 255 for f in files), [f.name for f in files]
    want = dict(zip([total, other], onnxruntime.InferenceSession(str(tmp_path / "long.onnx")).run(
        None, {a: x0, b: x1})))
    with np.load(tmp_path / "dump" / "outputs.npz") as npz:
        assert sorted(npz.files) == sorted(want)
        for name, value in want.items():
            np.testing.assert_allclose(npz[name][0], value, rtol=1e-6)
    written = {f.name: np.loadtxt(f) for f in files}
    assert sorted(tuple(v) for v in written.values()) == sorted(tuple(v.ravel()) for v in
                                                                 [x0, x1, want[total], want[other]])


def test_memory_plan_draws_names_as_plain_text(demo_model, tmp_path: Path):
    json_path, data_path = demo_model
    text = json_path.read_text().replace('"/fc1/Gemm_output_0"', json.dumps(r"$x^^$ fc1"))
    doc = json.loads(text)
    doc["name"] = r"$\frac{$"
    (tmp_path / "math.json").write_text(json.dumps(doc))
    (tmp_path / "math.data").write_bytes(data_path.read_bytes())
    [result] = run_many([["export", "glow", "--model", "math.json", "--model-data", "math.data", "--output-path",
                          "bundle", "--dump-memory-plan", "plan.png"]], cwd=tmp_path)
    assert result.code == 0, result.stderr  # matplotlib's mathtext ValueError (exit 1) before
    assert (tmp_path / "plan.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_batch_logs_and_messages_are_bounded(lenet: Path, tmp_path: Path):
    (tmp_path / "long.yml").write_text(f"models:\n  - name: m\n    model: {lenet / 'lenet.onnx'}\n"
                                       f"    inputs: {'x' * 200_000}\n")
    (tmp_path / "huge_key.yml").write_text(f"models:\n  - name: m\n    model: {lenet / 'lenet.onnx'}\n"
                                           f"    {'k' * 1000}: 1\n")
    results = run_many([["batch", "long.yml"], ["batch", "huge_key.yml"]], cwd=tmp_path)
    assert_refused(results[0], "models[0] (m): 'inputs' is 200,000 characters long")
    assert_refused(results[1], "unknown key")
    assert max(len(line) for line in results[1].lines) < 1000
    assert not (tmp_path / "batch_output").exists()
    # a step printing without end: the log stops at its bound, with a line saying so
    log = BoundedLog(tmp_path / "log.txt", limit=100_000)
    proc = subprocess.Popen([sys.executable, "-c", "import sys\nfor _ in range(300): sys.stdout.write('y' * 10000)"],
                            stdout=subprocess.PIPE)
    while chunk := proc.stdout.read1(65536):
        log.write(chunk)
    proc.wait()
    log.write("after the cut\n")
    data = (tmp_path / "log.txt").read_bytes()
    assert len(data) < 100_200 and data.endswith(b"... truncated: log.txt is limited to 100,000 bytes\n")
    assert bounded("reason\n" + "z" * 10_000).count("\n") == 0 and len(bounded("z" * 10_000)) == 400
