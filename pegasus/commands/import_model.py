"""``pegasus import <framework>``: convert a framework's model file into NAME.json + NAME.data."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from pegasus.errors import PegasusError
from pegasus.fileio import AtomicFileSet, check_target
from pegasus.ir import serialize
from pegasus.ir.dtypes import DType


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("import", help="import a trained model into pegasus' model files",
                                   description="Convert a trained model into NAME.json (graph) + NAME.data (weights).")
    frameworks = parser.add_subparsers(dest="framework", metavar="FRAMEWORK", required=True)
    onnx = frameworks.add_parser("onnx", help="import an ONNX model (.onnx), opset 7 and newer",
                                 description="Import an ONNX model (.onnx), opsets 7 to the newest onnx knows.")
    onnx.add_argument("--model", required=True, help="the .onnx file to import")
    _add_common(onnx)
    onnx.set_defaults(run=run_onnx)
    tflite = frameworks.add_parser("tflite", help="import a TensorFlow Lite model (.tflite), float or quantized",
                                   description="Import a TensorFlow Lite flatbuffer (.tflite). The graph keeps the "
                                               "file's channels-last shapes and tensor names.")
    tflite.add_argument("--model", required=True, help="the .tflite file to import")
    tflite.add_argument("--subgraph", type=int, default=0, help="which subgraph to import (default 0)")
    _add_common(tflite, dtypes=False)
    tflite.add_argument("--output-quantize", help="for a pre-quantized (int8/uint8/int16x8) model, the .quantize "
                                                  "table of its own parameters to write (default: next to the "
                                                  ".json, MODEL_STEM.quantize)")
    tflite.set_defaults(run=run_tflite)
    keras = frameworks.add_parser("keras", help="import a Keras model (.h5, .hdf5, .keras) without running it",
                                  description="Import a Keras model saved by Keras 2 (tf.keras, .h5) or Keras 3 "
                                              "(.keras, .h5), read as data: nothing in the file is run, and neither "
                                              "Keras nor TensorFlow is needed. Tensors are named after the layers.")
    keras.add_argument("--model", required=True, help="the .h5/.hdf5/.keras file to import")
    keras.add_argument("--allow-unsafe", action="store_true",
                       help="import Lambda layers and custom objects where their config maps onto registry ops "
                            "(a Lambda naming a Keras activation); their code is still never run")
    keras.add_argument("--convert-engine", choices=("Keras", "TFLite"),
                       help="Acuity's (reserved for future use there): pegasus reads the Keras file itself either way "
                            "(a note on stderr says so)")
    _add_common(keras, dtypes=False)
    keras.set_defaults(run=run_keras)
    _add_tensorflow(frameworks)
    _add_pytorch(frameworks)
    _add_caffe(frameworks)
    _add_darknet(frameworks)


def _add_common(parser: argparse.ArgumentParser, dtypes: bool = True) -> None:
    parser.add_argument("--inputs", help="input tensor names, space separated, e.g. 'input_1 input_2'; cuts the "
                                         "graph there (default: the model's inputs)")
    parser.add_argument("--outputs", help="output tensor names, space separated (default: the model's outputs)")
    parser.add_argument("--input-size-list", help="shape of each input without the batch dimension, dims "
                                                  "separated by ',' and inputs by '#', e.g. '3,224,224#10'")
    parser.add_argument("--size-with-batch", help="per input, 'True' if its --input-size-list entry includes "
                                                  "the batch dimension, e.g. 'True,False' (default: False)")
    if dtypes:
        parser.add_argument("--input-dtype-list", help="dtype of each input separated by '#': float, int8, uint8, "
                                                       "int16, uint16, int32, int64 (default: as the model declares)")
        parser.add_argument("--define-symbol", action="append", default=[], metavar="NAME=VALUE",
                            help="value of a symbolic dimension (e.g. N=1 or unk__286=1); repeat for several")
    parser.add_argument("--output-model", help="the .json file to write (default: MODEL_STEM.json here; a missing "
                                                "folder is created)")
    parser.add_argument("--output-data", help="the .data file to write (default: MODEL_STEM.data here)")
    parser.add_argument("--no-optimize", action="store_true",
                        help="skip folding/fusion passes (still infers shapes); for debugging an import")


def parse_symbols(items: list[str]) -> dict[str, int]:
    symbols = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip().lstrip("-").isdigit():
            raise PegasusError(f"--define-symbol expects NAME=INTEGER, got '{item}'")
        symbols[name.strip()] = int(value)
    return symbols


def parse_size_list(text: str | None, with_batch: str | None, batch_of: list[int | None]) -> list[list[int]] | None:
    """--input-size-list + --size-with-batch → full shapes (batch = the model's fixed batch, else 1)."""
    if not text:
        return None
    entries = text.split("#")
    flags = [f.strip().lower() for f in with_batch.split(",")] if with_batch else ["false"] * len(entries)
    if len(flags) != len(entries):
        raise PegasusError(f"--size-with-batch has {len(flags)} entries for {len(entries)} sizes in --input-size-list")
    shapes = []
    for index, (entry, flag) in enumerate(zip(entries, flags)):
        if flag not in ("true", "false"):
            raise PegasusError(f"--size-with-batch: expected True or False, got '{flag}'")
        try:
            dims = [int(d) for d in entry.split(",") if d.strip()]
        except ValueError:
            raise PegasusError(f"--input-size-list: '{entry}' is not a comma-separated list of integers") from None
        if any(d <= 0 for d in dims):
            raise PegasusError(f"--input-size-list: dimensions must be positive, got '{entry}'")
        if flag == "false":
            batch = batch_of[index] if index < len(batch_of) and batch_of[index] else 1
            dims = [batch] + dims
        shapes.append(dims)
    return shapes


def parse_dtype_list(text: str | None) -> list[DType] | None:
    if not text:
        return None
    try:
        return [DType.parse(item) for item in text.split("#")]
    except ValueError as exc:
        raise PegasusError(f"--input-dtype-list: {exc}") from None


def output_paths(args: argparse.Namespace) -> tuple[Path, Path, str]:
    """NAME.json and NAME.data to write (checked before any work: a path under a file is refused) and NAME."""
    stem = Path(args.model).stem
    json_path = Path(args.output_model) if args.output_model else Path(f"{stem}.json")
    data_path = Path(args.output_data) if args.output_data else json_path.with_suffix(".data")
    check_target(json_path, "--output-model"), check_target(data_path, "--output-data")
    name = re.sub(r"\W", "_", json_path.stem)
    return json_path, data_path, name


def names(text: str | None) -> list[str] | None:
    """--inputs/--outputs: tensor names separated by spaces; None when not given."""
    return text.split() if text else None


def note(line: str) -> None:
    """A one-line remark of an importer for the user (a defaulted batch, dequantized weights...)."""
    print(line, file=sys.stderr)


def run_onnx(args: argparse.Namespace) -> int:
    from pegasus.importers.onnx.loader import declared_batches, import_onnx, load_model

    json_path, data_path, name = output_paths(args)
    model = load_model(args.model)
    inputs = names(args.inputs)
    shapes = parse_size_list(args.input_size_list, args.size_with_batch, declared_batches(model, inputs))
    try:
        graph = import_onnx(model, inputs=inputs, outputs=names(args.outputs),
                            input_shapes=shapes, input_dtypes=parse_dtype_list(args.input_dtype_list),
                            symbols=parse_symbols(args.define_symbol), name=name, optimize=not args.no_optimize,
                            note=note)
    except PegasusError as exc:  # what the model holds is named with its file
        if exc.where is not None:
            raise
        raise PegasusError(exc.message, where=args.model) from exc
    source = {"framework": "onnx", "file": Path(args.model).name, "opset": _opset(model)}
    return _save(args, graph, source, json_path, data_path)


def _save(args: argparse.Namespace, graph, source: dict, json_path: Path, data_path: Path,
          table=None, table_path: Path | None = None) -> int:
    """Write NAME.json + NAME.data (and a pre-quantized model's table) together, then say what was written."""
    text, blob = serialize.graph_to_files(graph, source)
    with AtomicFileSet() as files:
        files.stage(json_path, text)
        files.stage(data_path, blob)
        if table is not None:
            from pegasus.quantizers.quantize_file import previous_text, render_table

            files.stage(table_path, render_table(table, previous_text(table_path)))
    print(f"imported {args.model}: {len(graph.nodes)} layers, {len(graph.constants())} constant tensors "
          f"-> {json_path}, {data_path}")
    if table is not None:
        print(f"  its own quantization ({table.quantizer}-{table.qtype}, rounding {table.rounding}, "
              f"{len(table.tensors)} tensors) -> {table_path}")
    for name_ in graph.inputs:
        print(f"  input  {name_}: {graph.type_of(name_)}")
    for name_ in graph.outputs:
        print(f"  output {name_}: {graph.type_of(name_)}")
    _warn_oversized(graph)
    return 0


def _warn_oversized(graph) -> None:
    """One line on stderr when a tensor is over 2 GiB (elements or bytes): no bundle can hold it."""
    from pegasus.exporters.glow.memory.plan import MAX_INDEX, describe_size, oversized_tensors

    too_big = oversized_tensors(graph)
    if too_big:
        more = "" if len(too_big) == 1 else f" (and {len(too_big) - 1} more)"
        print(f"warning: {describe_size(graph, too_big[0])}{more} is over 2 GiB: export glow will refuse it (at most "
              f"{MAX_INDEX:,} elements and bytes per tensor)", file=sys.stderr)


def run_tflite(args: argparse.Namespace) -> int:
    from pegasus.importers.tflite.loader import import_tflite
    from pegasus.importers.tflite.quantized import quantize_table
    from pegasus.importers.tflite.reader import read_tflite

    json_path, data_path, name = output_paths(args)
    table_path = Path(args.output_quantize) if args.output_quantize else json_path.with_suffix(".quantize")
    check_target(table_path, "--output-quantize")
    model = read_tflite(args.model, args.subgraph)
    inputs = names(args.inputs)
    outputs = names(args.outputs)
    batches = [1] * len(inputs or model.inputs)
    shapes = parse_size_list(args.input_size_list, args.size_with_batch, batches)
    graph = import_tflite(model, inputs=inputs, outputs=outputs, input_shapes=shapes, name=name,
                          optimize=not args.no_optimize, note=note)
    table = quantize_table(model, graph, inputs, outputs, note=note)
    source = {"framework": "tflite", "file": Path(args.model).name, "subgraph": args.subgraph, "layout": "nhwc"}
    return _save(args, graph, source, json_path, data_path, table, table_path)


def run_keras(args: argparse.Namespace) -> int:
    from pegasus.importers.keras.loader import import_keras
    from pegasus.importers.keras.reader import read_keras

    if args.convert_engine:
        note(f"pegasus: note: --convert-engine {args.convert_engine}: pegasus reads the Keras file itself (no "
             "conversion engine); the flag changes nothing")
    json_path, data_path, name = output_paths(args)
    model = read_keras(args.model)
    inputs = names(args.inputs)
    shapes = parse_size_list(args.input_size_list, args.size_with_batch, [])   # batch 1 unless given
    graph = import_keras(model, inputs=inputs, outputs=names(args.outputs),
                         input_shapes=shapes, name=name, optimize=not args.no_optimize, allow_unsafe=args.allow_unsafe,
                         note=note)
    layout = "nchw" if any(getattr(node.attrs, "channels_last", None) is False for node in graph.nodes) else "nhwc"
    source = {"framework": "keras", "file": Path(args.model).name, "keras_version": model.version, "layout": layout}
    return _save(args, graph, source, json_path, data_path)


def _add_tensorflow(frameworks) -> None:
    tensorflow = frameworks.add_parser(
        "tensorflow", help="import a TensorFlow model: frozen graph (.pb), SavedModel folder, or .meta + checkpoint",
        description="Import a TensorFlow frozen GraphDef (.pb/.pbtxt), a SavedModel folder (its serving signature) "
                    "or a TF1 MetaGraph (.meta) with its checkpoint, read as data (nothing of the model runs). The "
                    "graph keeps the model's channels-last shapes.")
    tensorflow.add_argument("--model", required=True, help="the .pb file, SavedModel folder or .meta file")
    _add_common(tensorflow, dtypes=False)
    tensorflow.add_argument("--signature", help="the SavedModel signature to import (default: serving_default)")
    tensorflow.add_argument("--mean-values", help="per input, separated by ',': the mean of a quantized model's "
                                                  "input; the graph first computes (x - mean) / std")
    tensorflow.add_argument("--std-values", help="per input, separated by ',': the std of a quantized model's input")
    tensorflow.add_argument("--predef-file", help="an .npz of values for placeholders that are not inputs (e.g. "
                                                  "np.savez('prd.npz', is_training=False)); they become constants")
    tensorflow.add_argument("--subgraphs", help="import the union of cuts: 'in1,in2#out1,out2;in3#out3' (inputs "
                                                "of a cut that another cut produces connect inside)")
    tensorflow.set_defaults(run=run_tensorflow)


def _floats(text: str | None, flag: str) -> list[float] | None:
    if text is None:
        return None
    try:
        return [float(v) for v in text.replace("#", ",").replace(" ", ",").split(",") if v.strip()]
    except ValueError:
        raise PegasusError(f"{flag}: '{text}' is not a comma-separated list of numbers") from None


def run_tensorflow(args: argparse.Namespace) -> int:
    from pegasus.importers.tensorflow.loader import (
        declared_batches,
        import_tensorflow,
        interface,
        load_predef,
        parse_subgraphs,
    )
    from pegasus.importers.tensorflow.reader import read_tensorflow

    json_path, data_path, name = output_paths(args)
    subgraphs = parse_subgraphs(args.subgraphs) if args.subgraphs else None
    mean, std = _floats(args.mean_values, "--mean-values"), _floats(args.std_values, "--std-values")
    predef = load_predef(args.predef_file) if args.predef_file else None
    model = read_tensorflow(args.model, args.signature)
    inputs = names(args.inputs)
    outputs = names(args.outputs)
    shapes = parse_size_list(args.input_size_list, args.size_with_batch,
                             declared_batches(model, interface(model, inputs, outputs, subgraphs)[0]))
    graph = import_tensorflow(model, inputs=inputs, outputs=outputs, input_shapes=shapes, mean_values=mean,
                              std_values=std, predef=predef, subgraphs=subgraphs, name=name,
                              optimize=not args.no_optimize, note=note)
    source = {"framework": "tensorflow", "file": Path(args.model).name, "format": model.kind, "layout": "nhwc"}
    return _save(args, graph, source, json_path, data_path)


def _opset(model) -> int:
    from pegasus.importers.onnx.loader import model_opset

    return model_opset(model)


def _add_pytorch(frameworks) -> None:
    pytorch = frameworks.add_parser(
        "pytorch", help="import a PyTorch model: TorchScript (.pt) or a torch.export program (.pt2)",
        description="Import a TorchScript archive (torch.jit.save of a traced or scripted module) or a torch.export "
                    "program (torch.export.save, .pt2). A pickle (a state_dict, torch.save(model), a checkpoint) is "
                    "refused: nothing in it is run. Layers are named after the module paths (features.0.0).")
    pytorch.add_argument("--model", required=True, help="the .pt (TorchScript) or .pt2 (torch.export) file")
    _add_common(pytorch, dtypes=False)
    pytorch.add_argument("--input-dtype-list", help="dtype of each input separated by '#': float, int8, uint8, "
                                                    "int16, uint16, int32, int64 (default: float32, or as a .pt2 "
                                                    "declares)")
    for action in pytorch._actions:
        if action.dest == "inputs":
            action.help = ("the model's input names (the forward's arguments) in the order --input-size-list gives "
                           "their sizes (default: the forward's order)")
        elif action.dest == "input_size_list":
            action.help += "; required for TorchScript, which keeps no input shapes"
    pytorch.set_defaults(run=run_pytorch)


def run_pytorch(args: argparse.Namespace) -> int:
    from pegasus.importers.pytorch.loader import declared_batches, import_pytorch, read_model

    json_path, data_path, name = output_paths(args)
    model_file, model = read_model(args.model)
    inputs = names(args.inputs)
    batches = declared_batches(model)
    if inputs:
        order = [n for n, _, _ in model.inputs]
        batches = [batches[order.index(n)] if n in order else None for n in inputs]
    shapes = parse_size_list(args.input_size_list, args.size_with_batch, batches)
    graph = import_pytorch((model_file, model), inputs=inputs, outputs=names(args.outputs),
                           input_shapes=shapes, input_dtypes=parse_dtype_list(args.input_dtype_list), name=name,
                           optimize=not args.no_optimize, note=note)
    source = {"framework": "pytorch", "file": Path(args.model).name, "format": model_file.kind, "layout": "nchw"}
    return _save(args, graph, source, json_path, data_path)


def _add_outputs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output-model", help="the .json file to write (default: MODEL_STEM.json here; a missing "
                                                "folder is created)")
    parser.add_argument("--output-data", help="the .data file to write (default: MODEL_STEM.data here)")
    parser.add_argument("--no-optimize", action="store_true",
                        help="skip folding/fusion passes (still infers shapes); for debugging an import")


def _add_caffe(frameworks) -> None:
    caffe = frameworks.add_parser("caffe", help="import a Caffe model (.prototxt + .caffemodel)",
                                  description="Import a Caffe network (text .prototxt, current or legacy V1 layers) "
                                              "with its weights (binary .caffemodel). The graph ends before SSD's "
                                              "PriorBox/DetectionOutput post-processing.")
    caffe.add_argument("--model", required=True, help="the .prototxt file to import")
    caffe.add_argument("--weights", help="the .caffemodel file; without it the layers get seeded random weights "
                                         "(a warning says so)")
    caffe.add_argument("--proto", choices=("caffe", "lstm_caffe"), default="caffe",
                       help="the Caffe protocol the files follow (default caffe; lstm_caffe is accepted for Acuity's "
                            "LSTM models and reads the same messages)")
    _add_outputs(caffe)
    caffe.set_defaults(run=run_caffe)


def run_caffe(args: argparse.Namespace) -> int:
    from pegasus.importers.caffe.loader import import_caffe

    json_path, data_path, name = output_paths(args)
    graph = import_caffe(args.model, args.weights, proto=args.proto, name=name, optimize=not args.no_optimize,
                         note=note)
    source = {"framework": "caffe", "file": Path(args.model).name, "layout": "nchw"}
    if args.weights:
        source["weights"] = Path(args.weights).name
    return _save(args, graph, source, json_path, data_path)


def _add_darknet(frameworks) -> None:
    darknet = frameworks.add_parser("darknet", help="import a Darknet model (.cfg + .weights), e.g. the YOLO family",
                                    description="Import a Darknet network (.cfg) with its weights (.weights). YOLO "
                                                "and region heads end the graph with their raw input tensors; "
                                                "decoding boxes is post-processing.")
    darknet.add_argument("--model", required=True, help="the .cfg file to import")
    darknet.add_argument("--weights", required=True, help="the .weights file")
    _add_outputs(darknet)
    darknet.set_defaults(run=run_darknet)


def run_darknet(args: argparse.Namespace) -> int:
    from pegasus.importers.darknet.loader import import_darknet

    json_path, data_path, name = output_paths(args)
    graph = import_darknet(args.model, args.weights, name=name, optimize=not args.no_optimize,
                           note=note)
    source = {"framework": "darknet", "file": Path(args.model).name, "weights": Path(args.weights).name,
              "layout": "nchw"}
    return _save(args, graph, source, json_path, data_path)
