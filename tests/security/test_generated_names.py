"""Issue 37 item 5: a model's names are data in every generated file. The demo LeNet with its input and output
tensors, its graph and the bundle renamed to C, Make and shell payloads (each would create a canary file if it
ever ran) is imported, exported, built with ``make`` as the bundle's own Makefile says and run through the
example program: no canary appears and the output still equals onnxruntime's on the same input."""

from __future__ import annotations

import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from pegasus.errors import PegasusError
from pegasus.exporters.glow.generated_text import bundle_name, c_string, dot_string, fill_template
from tests.conftest import DEMO_DIR
from tests.security.harness import assert_no_canary, run_many


def _c_payload(canary: str) -> str:
    """Closes the output table's row and string, then defines a constructor running ``touch canary``."""
    codes = ",".join(str(ord(c)) for c in f"touch {canary}") + ",0"
    return (",0,0,0,K_F32,0,0}}; __attribute__((constructor)) static void pwn(void)"
            "{system((char[]){" + codes + "});} static const int pad[]={0 //")


def _cases(folder) -> dict[str, tuple[str, str, str, str]]:
    """case -> (input name, output name, graph name, --network-name)."""
    c = _c_payload(folder / "PWNED_c")
    make = f"$(shell touch {folder}/PWNED_make)"
    shell = f"`touch {folder}/PWNED_sh`$(touch {folder}/PWNED_sh2);touch {folder}/PWNED_sh3"
    comment = f'*/ ??/\n#include "/dev/null" \\\nint x = system("touch {folder}/PWNED_comment"); /* ??= \\'
    return {
        "placeholder": ("@OUTPUTS@", c, "@NAME@", "net"),      # the round-2 attack: template placeholders
        "make_shell": (make + "\n\t" + shell + " #", shell + "\\", make, make + "\n" + shell),
        "comments": (comment, "@INPUTS@" + comment, comment, "@NAME@"),
    }


def _renamed_lenet(path, input_name: str, output_name: str, graph_name: str) -> None:
    model = onnx.load(DEMO_DIR / "lenet_mnist.onnx")
    graph = model.graph
    old_in, old_out = graph.input[0].name, graph.output[0].name
    for node in graph.node:
        node.input[:] = [input_name if n == old_in else n for n in node.input]
        node.output[:] = [output_name if n == old_out else n for n in node.output]
    graph.input[0].name, graph.output[0].name, graph.name = input_name, output_name, graph_name
    onnx.save(model, path)


def test_payload_names_stay_data_through_build_and_run(tmp_path):
    cases = _cases(tmp_path)
    argv = []
    for case, (input_name, output_name, graph_name, network) in cases.items():
        _renamed_lenet(tmp_path / f"{case}.onnx", input_name, output_name, graph_name)
        argv += [["import", "onnx", "--model", tmp_path / f"{case}.onnx", "--output-model", tmp_path / f"{case}.json",
                  "--output-data", tmp_path / f"{case}.data"],
                 ["export", "glow", "--model", tmp_path / f"{case}.json", "--model-data", tmp_path / f"{case}.data",
                  "--output-path", tmp_path / case, "--network-name", network]]
    results = run_many(argv, cwd=tmp_path)
    for result in results:
        assert result.code == 0, result.stderr
    image = np.random.default_rng(3).random((1, 1, 28, 28), np.float32)
    np.save(tmp_path / "digit.npy", image)
    for case, (input_name, *_rest) in cases.items():
        folder = tmp_path / case
        build = subprocess.run(["make", "-C", str(folder)], capture_output=True, text=True, timeout=300)
        assert build.returncode == 0, build.stdout + build.stderr
        programs = sorted(folder.glob("*_run"))
        assert len(programs) == 1, programs
        run = subprocess.run([str(programs[0]), "-o", str(folder / "out.bin"), str(tmp_path / "digit.npy")],
                             cwd=folder, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        expected = ort.InferenceSession(str(tmp_path / f"{case}.onnx")).run(None, {input_name: image})[0]
        actual = np.fromfile(folder / "out.bin", np.float32).reshape(expected.shape)
        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5, err_msg=case)
    assert_no_canary(tmp_path)


def test_templates_are_filled_in_one_pass():
    text = fill_template("a @X@ b @Y@", {"X": "@Y@", "Y": "@X@"})
    assert text == "a @Y@ b @X@"
    with pytest.raises(ValueError):
        fill_template("@Z@", {})


@pytest.mark.parametrize("name", ["", "3net", "a-b", "a b", "café", "a\nb", "$(x)", "n" * 201])
def test_bundle_names_must_be_identifiers(name):
    with pytest.raises(PegasusError):
        bundle_name(name)


def test_c_and_dot_strings_hold_no_syntax():
    for text in ['"', "\\", "??/", "*/", "\n", "é", "%s"]:
        literal = c_string(text)[1:-1]
        assert not set(literal) & set('"?*\n'), literal
        assert all(part[:3].isdigit() and set(part[:3]) <= set("01234567") for part in literal.split("\\")[1:])
        assert not set(dot_string(text)[1:-1]) & set('"\\\n{}|<>')
