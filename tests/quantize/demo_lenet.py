"""The demo LeNet imported and quantized in-process, shared by the comparison, entropy and MLE tests."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from pegasus.cli import main
from pegasus.ir import serialize
from pegasus.ir.graph import Graph
from pegasus.quantized.params import QuantTable
from pegasus.quantizers.quantize_file import load_table
from pegasus.runtime import samples
from pegasus.runtime.inputmeta import load_input_meta

DEMO = Path(__file__).resolve().parents[2] / "conversion_scripts" / "demo"
META = DEMO / "lenet_mnist_inputmeta.yml"


def import_lenet(folder: Path) -> Path:
    assert main(["import", "onnx", "--model", str(DEMO / "lenet_mnist.onnx"), "--output-model",
                 str(folder / "lenet.json"), "--output-data", str(folder / "lenet.data")]) == 0
    return folder


def quantize(folder: Path, *extra: str, table: str = "lenet.quantize") -> int:
    """``pegasus quantize`` uint8 on 10 x 10 calibration samples of the demo dataset."""
    return main(["quantize", "--model", str(folder / "lenet.json"), "--model-data", str(folder / "lenet.data"),
                 "--with-input-meta", str(META), "--model-quantize", str(folder / table), "--quantizer",
                 "asymmetric_affine", "--qtype", "uint8", "--batch-size", "10", "--iterations", "10", "--rebuild",
                 *extra])


def load(folder: Path, table: str = "lenet.quantize") -> tuple[Graph, QuantTable]:
    graph = serialize.load(folder / "lenet.json", folder / "lenet.data")
    return graph, load_table(folder / table, graph, serialize.graph_digest(graph))


def demo_feeds(graph: Graph, count: int) -> list[dict[str, np.ndarray]]:
    """The first ``count`` samples of the demo dataset, preprocessed as the input meta says."""
    return list(samples.iterate_samples(graph, load_input_meta(META), batch_size=1, iterations=count))


def heldout_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 1,000 held-out MNIST digits (float32 [N, 1, 28, 28] in 0..1) and their labels."""
    sys.path.insert(0, str(DEMO))
    from heldout import heldout_digits as digits

    return digits()
