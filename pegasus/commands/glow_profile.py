"""Glow's quantization profile for ``model-profiler`` / ``image-classifier -dump-profile`` and
``model-compiler -load-profile``: images preprocessed as Glow's -image-* options say, the ranges observed by
quantizers' calibration, and back into a .quantize through quantizers' table assignment.

The profile is YAML: the tool and its version, the graph digest, one digest per layer (to name the first layer
that differs when a profile meets another graph) and per tensor (``nodeOutputName`` as Glow calls it) its min,
max and a histogram of the sampled values over [min, max].
"""

from __future__ import annotations

from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import numpy as np

from pegasus import __version__, yamlsafe
from pegasus.errors import PegasusError
from pegasus.fileio import atomic_write
from pegasus.ir import serialize
from pegasus.ir.graph import Graph

#: -image-mode → (mean, scale) of pegasus's preprocessing out = (pixel - mean) * scale
IMAGE_MODES = {"0to1": (0.0, 1 / 255), "neg1to1": (127.5, 1 / 127.5), "0to255": (0.0, 1.0),
               "neg128to127": (128.0, 1.0)}
HISTOGRAM_BINS = 64
PROFILE_FORMAT = 1


def _choice(options: dict, key: str, valid: tuple[str, ...], default: str) -> str:
    value = options.get(key, default)
    if value not in valid:
        raise PegasusError(f"unknown -{key} '{value}' (valid: {', '.join(valid)})")
    return value


def image_feeds(graph: Graph, images: list[str], options: dict) -> Iterator[dict[str, np.ndarray]]:
    """The model input of each image, preprocessed as Glow's -image-mode/-image-layout/-image-channel-order say
    (Glow's defaults: 0to255, NCHW, BGR)."""
    from pegasus.runtime.inputmeta import PortMeta
    from pegasus.runtime.inputs import read_sample

    mode = _choice(options, "image-mode", tuple(IMAGE_MODES), "0to255")
    layout = _choice(options, "image-layout", ("NCHW", "NHWC"), "NCHW").lower()
    order = _choice(options, "image-channel-order", ("RGB", "BGR"), "BGR")
    name = options.get("model-input-name", graph.inputs[0])
    if name not in graph.inputs or len(graph.inputs) != 1:
        raise PegasusError(f"-model-input-name={name}: the model's inputs are {', '.join(graph.inputs)} (the image "
                           "tools feed a model with one image input)")
    ttype = graph.type_of(name)
    mean, scale = IMAGE_MODES[mode]
    channels = ttype.shape[1 if layout == "nchw" else -1] if len(ttype.shape) == 4 else 1
    port = PortMeta(name, list(ttype.shape), layout=layout, reverse_channel=order == "BGR" and channels == 3,
                    mean=[mean] * channels, scale=[scale] * channels)
    for path in images:
        yield {name: read_sample(path, ttype, port, name)}


def _histogram(values: np.ndarray | None, lo: float, hi: float) -> list[int]:
    if values is None or values.size == 0 or not hi > lo:
        return [int(0 if values is None else values.size)] + [0] * (HISTOGRAM_BINS - 1)
    return [int(c) for c in np.histogram(values, bins=HISTOGRAM_BINS, range=(lo, hi))[0]]


def write_profile(graph: Graph, feeds, count: int, options: dict, path: Path) -> None:
    """Calibrate ``graph`` over the images (min/max observers) and write the profile to ``path``."""
    from pegasus.quantizers.calibrate import calibrate

    calibration = calibrate(graph, feeds, total=count, keep_values=True, progress=False)
    tensors = [{"nodeOutputName": name, "min": lo, "max": hi,
                "histogram": _histogram(calibration.values.get(name), lo, hi)}
               for name, (lo, hi) in calibration.ranges.items()]
    doc = {"format": PROFILE_FORMAT, "tool": f"pegasus {__version__} model-profiler",
           "quantization-schema": options.get("quantization-schema", "asymmetric"), "images": calibration.samples,
           "graph_digest": serialize.graph_digest(graph), "layer_digests": serialize.layer_digests(graph),
           "tensors": tensors}
    yaml = yamlsafe.make_yaml(round_trip=False)
    yaml.default_flow_style = None
    text = StringIO()
    yaml.dump(doc, text)
    atomic_write(path, text.getvalue())


def _load_profile(path: str) -> dict:
    doc = yamlsafe.load(path, "-load-profile", round_trip=False)
    if not isinstance(doc, dict) or doc.get("format") != PROFILE_FORMAT or not isinstance(doc.get("tensors"), list):
        raise PegasusError(f"-load-profile={path} is not a pegasus model-profiler profile (format {PROFILE_FORMAT})")
    return doc


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= 1e30  # NaN fails too


def _difference(profile: dict, graph: Graph) -> str:
    """What differs between the profiled graph and ``graph``: the first layer that differs."""
    theirs = profile.get("layer_digests") or {}
    ours = serialize.layer_digests(graph)
    for layer, digest in ours.items():
        if layer not in theirs:
            return f"layer '{layer}' is not in the profiled graph"
        if theirs[layer] != digest:
            return f"layer '{layer}' differs (first differing layer)"
    for layer in theirs:
        if layer not in ours:
            return f"the profiled graph's layer '{layer}' is not in this model"
    return "the layers match but the inputs, outputs or tensor types differ"


def table_from_profile(profile_path: str, json_path: Path, data_path: Path, scheme: tuple[str, str, bool],
                       table_path: Path) -> None:
    """The profile's ranges → each tensor's grid in ``scheme`` (quantizer, qtype, whether biases are int8: Glow's
    -quantization-precision-bias=Int8) by quantizers' assignment → ``table_path``."""
    from pegasus.quantizers.assign import build_table
    from pegasus.quantizers.quantize_file import save_table
    from pegasus.quantizers.schemes import Scheme

    profile = _load_profile(profile_path)
    graph = serialize.load(json_path, data_path)
    digest = serialize.graph_digest(graph)
    if profile.get("graph_digest") != digest:
        raise PegasusError(f"-load-profile={profile_path} was made for another graph: {_difference(profile, graph)}")
    ranges = {}
    for index, entry in enumerate(profile["tensors"]):
        name = entry.get("nodeOutputName") if isinstance(entry, dict) else None
        lo, hi = (entry.get("min"), entry.get("max")) if isinstance(entry, dict) else (None, None)
        if not isinstance(name, str) or not all(_finite(v) for v in (lo, hi)) or lo > hi:
            raise PegasusError(f"-load-profile={profile_path}: tensors[{index}] needs nodeOutputName and finite "
                               "min <= max (|value| <= 1e30)")
        ranges[name] = (float(lo), float(hi))
    quantizer, qtype, int8_bias = scheme
    table = build_table(graph, ranges, Scheme.of(quantizer, qtype), algorithm="normal", digest=digest,
                        int8_bias=int8_bias)
    save_table(table, table_path)
