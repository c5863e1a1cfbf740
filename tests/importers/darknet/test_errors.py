"""Every bad input to ``pegasus import darknet`` gives one line on stderr naming what is wrong and where, exit code
2, and writes nothing: a bad value (section, key and line), a missing input size, routes to layers that do not
exist or to a head's decoded output, unsupported sections (all listed at once) and options, a weights file too
short for the cfg (floats needed and found) or not one at all."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli
from tests.importers.darknet.harness import darknet_model, weights_bytes
from tests.support.cli_errors import assert_one_line_error

NET = "[net]\nwidth=16\nheight=16\nchannels=3\n"
CONV = "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\n"


def import_cli(tmp_path, cfg, weights):
    result = run_cli("import", "darknet", "--model", cfg, "--weights", weights, "--output-model",
                     tmp_path / "out" / "m.json", "--output-data", tmp_path / "out" / "m.data")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    return result


def model(tmp_path, text, **weights):
    return darknet_model(tmp_path, text, **weights)


@pytest.mark.parametrize("old, new, fragments", [
    ("size=3", "size=three", ["line 8, [convolutional] (layer 0) at line 5", "size = 'three' is not an integer"]),
    ("filters=4", "filters=0", ["line 7, [convolutional] (layer 0) at line 5", "filters = '0' must be at least 1"]),
    ("activation=leaky", "activation=sigmoidal", ["line 11, [convolutional] (layer 0)",
                                                  "activation = 'sigmoidal' is not a supported activation"]),
    ("width=16", "width=", ["line 2, [net] at line 1", "width = '' is not an integer"]),
    ("height=16\n", "", ["[net] at line 1: height is missing"]),
])
def test_bad_value_names_section_key_and_line(tmp_path, old, new, fragments):
    cfg, weights = model(tmp_path, NET + CONV)
    cfg.write_text((NET + CONV).replace(old, new))
    assert_one_line_error(import_cli(tmp_path, cfg, weights), "m.cfg", *fragments)


def test_route_to_a_missing_layer(tmp_path):
    text = NET + CONV + "[route]\nlayers=-1,5\n"
    cfg, weights = model(tmp_path, NET + CONV)
    cfg.write_text(text)
    assert_one_line_error(import_cli(tmp_path, cfg, weights), "line 13, [route] (layer 1) at line 12",
                          "layers = '-1,5' names layer 5, which is not an earlier layer")


def test_reading_a_head_output(tmp_path):
    text = NET + CONV + "[yolo]\nclasses=1\n" + CONV
    cfg, weights = model(tmp_path, NET + CONV + CONV)
    cfg.write_text(text)
    assert_one_line_error(import_cli(tmp_path, cfg, weights), "[convolutional] (layer 2)", "[yolo] layer 1",
                          "post-processing")


def test_unsupported_sections_listed_at_once(tmp_path):
    text = NET + CONV + "[reorg]\nstride=2\n" + CONV + "[scale_channels]\nfrom=-2\n[sam]\nfrom=-3\n"
    cfg, weights = model(tmp_path, NET + CONV + CONV)
    cfg.write_text(text)
    assert_one_line_error(import_cli(tmp_path, cfg, weights), "unsupported operators (3)",
                          "reorg at node 'reorg_1', line 12", "scale_channels at node 'scale_channels_3', line 21",
                          "sam at node 'sam_4', line 23")


def test_refused_option(tmp_path):
    cfg, weights = model(tmp_path, NET + CONV + "[maxpool]\nsize=2\nstride=2\nmaxpool_depth=1\n")
    assert_one_line_error(import_cli(tmp_path, cfg, weights), "line 15, [maxpool] (layer 1) at line 12",
                          "maxpool_depth = '1' is not supported")


@pytest.mark.parametrize("drop", [1, 40])
def test_weights_too_short(tmp_path, drop):
    text = NET + CONV + CONV.replace("filters=4", "filters=6")
    needed = 4 * 4 + 4 * 3 * 9 + 6 * 4 + 6 * 4 * 9
    cfg, weights = model(tmp_path, text, drop=drop)
    assert_one_line_error(import_cli(tmp_path, cfg, weights), "m.weights", f"need {needed:,} floats",
                          f"the file holds {needed - drop:,}", "run out in layer conv_1, line 12")


@pytest.mark.parametrize("data", [b"", b"\x00" * 10, b"\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x01\x00"],
                         ids=["empty", "short", "half_header"])
def test_not_a_weights_file(tmp_path, data):
    cfg, weights = model(tmp_path, NET + CONV)
    weights.write_bytes(data)
    assert_one_line_error(import_cli(tmp_path, cfg, weights), "m.weights", "not a Darknet weights file")


def test_cfg_without_net(tmp_path):
    cfg, weights = model(tmp_path, NET + CONV)
    cfg.write_text(CONV)
    assert_one_line_error(import_cli(tmp_path, cfg, weights), "m.cfg", "starts with a [net] section")


def test_binary_given_as_cfg(tmp_path):
    _, weights = model(tmp_path, NET + CONV)
    weights.write_bytes(weights_bytes(NET + CONV) + b"\xff\xfe")
    assert_one_line_error(import_cli(tmp_path, weights, weights), "not a Darknet cfg")


def test_line_without_equals(tmp_path):
    cfg, weights = model(tmp_path, NET + CONV)
    cfg.write_text((NET + CONV).replace("pad=1", "pad 1"))
    assert_one_line_error(import_cli(tmp_path, cfg, weights), "m.cfg", "line 10: 'pad 1' is not key=value")
