"""Glow's own command lines (``model-compiler``, ``model-profiler`` / ``image-classifier``) for users coming from
NXP eIQ / Glow: commands copied from Glow's documentation run unchanged (paths aside).

Nothing here computes anything itself: the single-dash options are translated onto ``pegasus import``, the
calibration observers of quantizers/, quantizers' table assignment and ``pegasus export glow``. An option that
pegasus does not implement is refused by name (exit 2), never ignored. The profile YAML holds the tool version,
the graph's digest and per-layer digests (so a profile of another graph is refused naming the first differing
layer) and per tensor its min/max and a histogram.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

from pegasus.errors import PegasusError
from pegasus.fileio import check_folder, check_target, require_file

#: option name → "value" (one), "multi" (repeatable) or "flag"
COMPILER_OPTIONS = {
    "backend": "value", "model": "value", "emit-bundle": "value", "model-input": "multi", "network-name": "value",
    "target": "value", "mcpu": "value", "float-abi": "value", "relocation-model": "value", "bundle-api": "value",
    "load-profile": "value", "quantization-schema": "value", "quantization-precision": "value",
    "quantization-precision-bias": "value", "enable-channelwise": "flag", "quantization-calibration": "value",
    "onnx-define-symbol": "multi", "dump-graph-DAG": "value", "use-cmsis": "flag", "verbose": "flag",
}
PROFILER_OPTIONS = {
    "backend": "value", "model": "value", "model-input-name": "value", "image-mode": "value",
    "image-layout": "value", "image-channel-order": "value", "dump-profile": "value", "quantization-schema": "value",
    "quantization-precision": "value", "quantization-precision-bias": "value", "enable-channelwise": "flag",
    "onnx-define-symbol": "multi", "verbose": "flag",
}
#: options Glow has and pegasus refuses, with the reason
REFUSED = {
    "keep-original-precision-for-nodes": "pegasus keeps layers in float by their layer name: list them under "
                                         "customized_quantize_layers and run pegasus quantize --hybrid",
}
SCHEMAS = ("asymmetric", "symmetric", "symmetric_with_uint8", "symmetric_with_power2_scale")


def parse_options(argv: list[str], spec: dict[str, str], tool: str) -> tuple[dict, list[str]]:
    """Glow's ``-name=value`` / ``-flag`` options (``--`` also accepted) → (options, positional arguments)."""
    options: dict = {name: [] for name, kind in spec.items() if kind == "multi"}
    positional = []
    for arg in argv:
        if not arg.startswith("-") or arg == "-":
            positional.append(arg)
            continue
        name, sep, value = arg.lstrip("-").partition("=")
        if name in REFUSED:
            raise PegasusError(f"option -{name} is not implemented by pegasus {tool}: {REFUSED[name]}")
        kind = spec.get(name)
        if kind is None:
            raise PegasusError(f"option -{name} is not implemented by pegasus {tool} (see README, 'Glow's command "
                               "lines')")
        if kind == "flag":
            if sep and value.lower() not in ("true", "1"):
                raise PegasusError(f"option -{name} is a flag: -{name} or -{name}=true, not '{arg}'")
            options[name] = True
        elif not sep or not value:
            raise PegasusError(f"option -{name} needs a value: -{name}=...")
        elif kind == "multi":
            options[name].append(value)
        elif name in options:
            raise PegasusError(f"option -{name} given twice")
        else:
            options[name] = value
    return options, positional


def pegasus_scheme(options: dict) -> tuple[str, str, bool]:
    """Glow's -quantization-schema/-precision/-precision-bias/-enable-channelwise → (quantizer, qtype, whether
    biases are int8)."""
    schema = options.get("quantization-schema", "asymmetric")
    precision = options.get("quantization-precision", "Int8")
    bias = options.get("quantization-precision-bias", "Int32")
    channelwise = options.get("enable-channelwise", False)
    if schema not in SCHEMAS:
        raise PegasusError(f"unknown -quantization-schema '{schema}' (valid: {', '.join(SCHEMAS)})")
    if precision not in ("Int8", "Int16"):
        raise PegasusError(f"unknown -quantization-precision '{precision}' (valid: Int8, Int16)")
    if bias not in ("Int8", "Int32"):
        raise PegasusError(f"unknown -quantization-precision-bias '{bias}' (valid: Int8, Int32)")
    if bias == "Int8" and precision != "Int8":
        raise PegasusError("-quantization-precision-bias=Int8 goes with -quantization-precision=Int8 (16-bit layers "
                           "keep wide biases)")
    if schema != "asymmetric" and channelwise:
        raise PegasusError(f"-enable-channelwise with -quantization-schema={schema} has no pegasus equivalent "
                           "(per-channel weights come with -quantization-schema=asymmetric)")
    if schema in ("asymmetric", "symmetric", "symmetric_with_uint8") and precision == "Int16":
        raise PegasusError(f"-quantization-schema={schema} with -quantization-precision=Int16 has no pegasus "
                           "equivalent (16-bit is dynamic_fixed_point: -quantization-schema="
                           "symmetric_with_power2_scale)")
    int8_bias = bias == "Int8"
    if schema == "asymmetric":
        return ("perchannel_symmetric_affine" if channelwise else "asymmetric_affine"), "int8", int8_bias
    if schema == "symmetric":
        return "symmetric_affine", "int8", int8_bias
    if schema == "symmetric_with_uint8":
        return "symmetric_affine", "uint8", int8_bias
    return "dynamic_fixed_point", "int8" if precision == "Int8" else "int16", int8_bias


def _model_file(path: str) -> Path:
    """-model: an .onnx or .tflite file, or a folder holding exactly one of them."""
    model = Path(path)
    if model.is_dir():
        found = sorted(p for p in model.iterdir() if p.suffix.lower() in (".onnx", ".tflite"))
        if len(found) != 1:
            raise PegasusError(f"-model={path} is a folder with {len(found)} .onnx/.tflite files: pegasus reads a "
                               "folder holding exactly one (Caffe2 predict_net/init_net folders are not supported)")
        return found[0]
    model = require_file(model, "-model")
    if model.suffix.lower() not in (".onnx", ".tflite"):
        raise PegasusError(f"-model={path}: pegasus's Glow front-end reads .onnx and .tflite files (convert other "
                           "frameworks with pegasus import)")
    return model


def _model_inputs(items: list[str]) -> tuple[str | None, str | None]:
    """-model-input=name,float,[d0,d1,...] (repeatable) → pegasus import's --inputs and --input-size-list."""
    names, sizes = [], []
    for item in items:
        match = re.fullmatch(r"([^,]+),(\w+),\[([\d,\s]+)\]", item)
        if not match:
            raise PegasusError(f"-model-input={item}: expected name,float,[d0,d1,...] (quantized input types "
                               "name,int8q,scale,offset,[...] are not implemented by pegasus)")
        name, dtype, dims = match.groups()
        if dtype != "float":
            raise PegasusError(f"-model-input={item}: type '{dtype}' is not implemented by pegasus (float only)")
        names.append(name)
        sizes.append(dims.replace(" ", ""))
    if not names:
        return None, None
    return " ".join(names), "#".join(sizes)


def import_model(model: Path, folder: Path, name: str, options: dict, inputs: str | None = None,
                 sizes: str | None = None) -> tuple[Path, Path, Path | None]:
    """``pegasus import onnx|tflite`` into ``folder``: (NAME.json, NAME.data, a pre-quantized model's .quantize)."""
    from pegasus.commands import import_model as importer

    json_path, data_path = folder / f"{name}.json", folder / f"{name}.data"
    symbols = [item.replace(",", "=", 1) for item in options.get("onnx-define-symbol", [])]
    args = argparse.Namespace(model=str(model), inputs=inputs, outputs=None, input_size_list=sizes,
                              size_with_batch=sizes and ",".join(["True"] * len(sizes.split("#"))),
                              input_dtype_list=None, define_symbol=symbols, output_model=str(json_path),
                              output_data=str(data_path), no_optimize=False, subgraph=0, output_quantize=None)
    if model.suffix.lower() == ".tflite":
        if symbols:
            raise PegasusError("-onnx-define-symbol applies to ONNX models, not to " + model.name)
        importer.run_tflite(args)
        table = json_path.with_suffix(".quantize")
        return json_path, data_path, table if table.is_file() else None
    importer.run_onnx(args)
    return json_path, data_path, None


def _check_cmsis(target) -> None:
    from pegasus.exporters.glow.target import CPUS

    info = CPUS.get(target.cpu)
    if not target.is_cortex_m or info is None or not info.has_dsp:
        raise PegasusError(f"-use-cmsis needs a Cortex-M CPU with the DSP extension (cortex-m4, -m7, -m33, -m55); "
                           f"{target.cpu} has none, so its integer kernels are plain Thumb code")


def model_compiler(argv: list[str]) -> int:
    from pegasus.commands.export import c_identifier, run_glow
    from pegasus.exporters.glow.target import resolve_target

    options, positional = parse_options(argv, COMPILER_OPTIONS, "model-compiler")
    if positional:
        raise PegasusError(f"model-compiler takes no positional argument, got '{positional[0]}'")
    for required in ("backend", "model", "emit-bundle"):
        if required not in options:
            raise PegasusError(f"model-compiler needs -{required}=...")
    if options["backend"] != "CPU":
        raise PegasusError(f"-backend={options['backend']} is not implemented by pegasus (CPU only)")
    if options.get("quantization-calibration", "none") not in ("none",):
        raise PegasusError(f"-quantization-calibration={options['quantization-calibration']} is not implemented by "
                           "pegasus from a profile (only 'none': min/max); use pegasus quantize --algorithm "
                           "kl_divergence")
    quantizing = "load-profile" in options
    scheme = pegasus_scheme(options)
    if not quantizing and any(key in options for key in ("quantization-schema", "quantization-precision",
                                                          "quantization-precision-bias", "enable-channelwise")):
        raise PegasusError("-quantization-* and -enable-channelwise need -load-profile=profile.yml")
    target = resolve_target(options.get("target"), options.get("mcpu"), options.get("float-abi"),
                            options.get("relocation-model"))
    if options.get("use-cmsis"):
        _check_cmsis(target)
    model = _model_file(options["model"])
    out_dir = check_folder(options["emit-bundle"], "-emit-bundle")
    name = c_identifier(options.get("network-name") or model.stem)
    inputs, sizes = _model_inputs(options["model-input"])
    # the imported model keeps the file's name (the graph digest a profile is tied to holds it)
    json_path, data_path, table_path = import_model(model, out_dir, c_identifier(model.stem), options, inputs, sizes)
    if quantizing:
        from pegasus.commands.glow_profile import table_from_profile

        table_path = check_target(out_dir / f"{name}.quantize", "-emit-bundle")
        table_from_profile(options["load-profile"], json_path, data_path, scheme, table_path)
    args = argparse.Namespace(model=str(json_path), model_data=str(data_path), output_path=str(out_dir),
                              network_name=name, target=target.arch, mcpu=options.get("mcpu"),
                              float_abi=options.get("float-abi"), relocation_model=options.get("relocation-model"),
                              bundle_api=options.get("bundle-api", "static"), fuse=True,
                              dtype="quantized" if table_path else "float32",
                              model_quantize=str(table_path) if table_path else None, quantized_io=False,
                              reuse_input_memory=False, compact_weights=False,
                              dump_graph_dag=options.get("dump-graph-DAG"), dump_memory_plan=None)
    return run_glow(args)


def model_profiler(argv: list[str], tool: str = "model-profiler") -> int:
    from pegasus.commands.export import c_identifier
    from pegasus.commands.glow_profile import image_feeds, write_profile
    from pegasus.ir import serialize

    options, images = parse_options(argv, PROFILER_OPTIONS, tool)
    if options.get("backend", "CPU") != "CPU":
        raise PegasusError(f"-backend={options['backend']} is not implemented by pegasus (CPU only)")
    if "model" not in options:
        raise PegasusError(f"{tool} needs -model=...")
    if not images:
        raise PegasusError(f"{tool} needs image files (PNG) before the options")
    if "quantization-schema" in options or "quantization-precision" in options:
        pegasus_scheme(options)  # checked here too: the same schema must be given to model-compiler
    model = _model_file(options["model"])
    profile = check_target(options["dump-profile"], "-dump-profile") if "dump-profile" in options else None
    with tempfile.TemporaryDirectory() as tmp:
        json_path, data_path, _ = import_model(model, Path(tmp), c_identifier(model.stem), options)
        graph = serialize.load(json_path, data_path)
    feeds = image_feeds(graph, images, options)
    if profile:
        write_profile(graph, feeds, len(images), options, profile)
        print(f"wrote {profile} ({len(images)} images)")
        return 0
    from pegasus.runtime import interpreter
    from pegasus.runtime.postprocess import top_n

    print(f"Model: {options['model']}")
    for path, sample in zip(images, feeds):
        values = interpreter.run(graph, sample)[graph.outputs[0]]
        for rank, (label, probability) in enumerate(top_n(values, 5), start=1):
            print(f" File: {path} Label-K{rank}: {label} (probability: {probability:.4f})")
    return 0


def _main(run, tool: str, argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = any(arg.lstrip("-") in ("verbose", "verbose=true") for arg in argv)
    try:
        return run([arg for arg in argv if arg.lstrip("-") not in ("verbose", "verbose=true")])
    except PegasusError as exc:
        if verbose:
            import traceback

            traceback.print_exc()
        print(f"{tool}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # the reader went away (model-compiler ... | head): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def compiler_main(argv: list[str] | None = None) -> int:
    return _main(model_compiler, "model-compiler", argv)


def profiler_main(argv: list[str] | None = None) -> int:
    return _main(model_profiler, "model-profiler", argv)


def classifier_main(argv: list[str] | None = None) -> int:
    return _main(lambda args: model_profiler(args, "image-classifier"), "image-classifier", argv)

