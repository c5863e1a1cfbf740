"""Where a light model's time goes on this machine: each layer of the float host bundle beside onnxruntime's own
per-node profile (1 thread), grouped by kind and shape, largest loss first.

The bundle is ``pegasus run --profile``'s instrumented one (exporters/glow/run/profile.py: a probe call before
each layer and after the last), linked here with a probe that adds the time-stamp counter's ticks between
probes to each layer's total; ticks become microseconds by the counter's rate measured against the wall clock.
onnxruntime's profile is its own JSON (``enable_profiling``), its nodes keyed the same way: a convolution by its
weights' shape, stride and own output shape (a bundle layer fused with a pooling is keyed by the convolution's
output; the pooling then appears on onnxruntime's side only), any other node by its op and output shape.
Single-layer benchmarks (bench_conv_layers.py) time onnxruntime with a layout conversion per layer that a
model does not pay; this compares the layers inside the models. Where the two counts of a row differ,
onnxruntime's graph optimiser rewrote those nodes otherwise (Inception-v2: some of its 1x1 convolutions keep a
per-channel Mul/Add as 1x1 depthwise convolutions, Adds and Relus the bundle folded away): compare such rows by the
total.

    python benchmarks/host_profile.py resnet50 [--runs 20] [--rows 30]
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_glow import feeds_for, models  # noqa: E402

from pegasus.exporters.glow.run.profile import export_instrumented  # noqa: E402
from pegasus.exporters.glow.target import resolve_target  # noqa: E402
from pegasus.importers.onnx.loader import import_onnx  # noqa: E402
from tests.support.host_runner import aligned  # noqa: E402

PROBE = """
#include <stdint.h>
#include <x86intrin.h>
uint64_t pegasus_ticks[65536];
static uint64_t last;
uint64_t pegasus_tsc(void) { return __rdtsc(); }
void pegasus_probe(int32_t index, uint8_t *mutable_weights, uint8_t *activations) {
    uint64_t now = __rdtsc();
    if (index > 0 && index <= 65536) pegasus_ticks[index - 1] += now - last;
    last = __rdtsc();
}
"""


def _tsc_per_us(library: ctypes.CDLL) -> float:
    library.pegasus_tsc.restype = ctypes.c_uint64
    start, ticks = time.perf_counter(), library.pegasus_tsc()
    time.sleep(0.2)
    return (library.pegasus_tsc() - ticks) / ((time.perf_counter() - start) * 1e6)


def _conv_key(weights: tuple, stride: int, out: tuple) -> str:
    return f"Conv w{tuple(weights)} s{stride} -> {tuple(out)}"


def _sizes(header: str) -> dict[str, int]:
    """The three buffers' sizes from NAME.h's ``NET_*_MEM_SIZE`` macros."""
    found = dict(re.findall(r"#define NET_(CONSTANT|MUTABLE|ACTIVATIONS)_MEM_SIZE\s+(\d+)", header))
    return {region: max(1, int(size)) for region, size in found.items()}


def bundle_layers(name: str, runs: int) -> list[tuple[str, float]]:
    """(key, µs per inference) of every layer of the host bundle of light model ``name``."""
    graph = import_onnx(onnx.load(str(models()[name])), name=name)
    nodes = {node.name: node for node in graph.nodes}
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        bundle = export_instrumented(graph, tmp, "net", resolve_target(None, None, None, "pic"))
        (tmp / "probe.c").write_text(PROBE)
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(tmp / "libnet.so"), str(tmp / "probe.c"),
                        str(tmp / "net.o")], check=True, capture_output=True)
        library = ctypes.CDLL(str(tmp / "libnet.so"))
        sizes = _sizes((tmp / "net.h").read_text())
        blob = (tmp / "net.weights.bin").read_bytes()
        constant = aligned(sizes["CONSTANT"])
        constant[:len(blob)] = np.frombuffer(blob, dtype=np.uint8)
        buffers = [constant, aligned(sizes["MUTABLE"]), aligned(sizes["ACTIVATIONS"])]  # inputs 0: same time
        args = [buf.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)) for buf in buffers]
        for _ in range(3):
            library.net(*args)
        ticks = (ctypes.c_uint64 * 65536).in_dll(library, "pegasus_ticks")
        ctypes.memset(ticks, 0, ctypes.sizeof(ticks))
        for _ in range(runs):
            library.net(*args)
        rate = _tsc_per_us(library)
        rows = []
        for index, layer in enumerate(bundle.layers):
            members = [nodes[part] for part in layer.split(" + ") if part in nodes]
            rows.append((_key(graph, members) if members else layer, ticks[index] / runs / rate))
        return rows


def _key(graph, members) -> str:
    """A layer's key from the imported graph's nodes (weights as imported, before the exporter re-lays them)."""
    head = members[0]
    if head.op == "Conv":
        x, w, y = (tuple(graph.type_of(name).shape) for name in (head.inputs[0], head.inputs[1], head.outputs[0]))
        return _conv_key(w, head.attrs.strides[0] if head.attrs.strides else 1, y)
    return f"{'+'.join(node.op for node in members)} {tuple(graph.type_of(members[-1].outputs[0]).shape)}"


def onnxruntime_nodes(name: str, runs: int) -> tuple[list[tuple[str, float]], list[str]]:
    """(key, µs per inference) of every node event onnxruntime's profile timed after the warm-up, and the keys
    of one run's nodes (for counting them)."""
    path = models()[name]
    feeds = feeds_for(onnx.load(str(path)), name)
    with tempfile.TemporaryDirectory() as folder:
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(folder) / "ort")
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        for _ in range(3 + runs):
            session.run(None, feeds)
        events = json.loads(Path(session.end_profiling()).read_text())
    timed = [event for event in events if event.get("cat") == "Node" and event["name"].endswith("_kernel_time")]
    per_run = len(timed) // (3 + runs)
    rows = []
    for position, event in enumerate(timed[3 * per_run:]):       # the warm-up runs' nodes come first
        args = event["args"]
        inputs = [next(iter(shape.values())) for shape in args.get("input_type_shape", [])]
        outputs = [next(iter(shape.values())) for shape in args.get("output_type_shape", [])]
        op = args.get("op_name", "?")
        if op == "Conv" and len(inputs) > 1 and outputs:
            stride = inputs[0][2] // outputs[0][2] if inputs[0][2] != outputs[0][2] else 1
            key = _conv_key(tuple(inputs[1]), stride, tuple(outputs[0]))
        else:
            key = f"{op} {tuple(outputs[0]) if outputs else ()}"
        rows.append((key, event["dur"] / runs, position < per_run))
    return [(key, us) for key, us, _ in rows], [key for key, _, first in rows if first]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="light model name (bench_glow.py's list)")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rows", type=int, default=30, help="rows printed, largest loss first")
    args = parser.parse_args()
    ours, theirs = collections.defaultdict(lambda: [0, 0.0]), collections.defaultdict(lambda: [0, 0.0])
    for key, us in bundle_layers(args.model, args.runs):
        ours[key][0] += 1
        ours[key][1] += us
    peer, one_run = onnxruntime_nodes(args.model, args.runs)
    for key, us in peer:
        theirs[key][1] += us
    for key in one_run:
        theirs[key][0] += 1
    keys = sorted(set(ours) | set(theirs), key=lambda key: theirs[key][1] - ours[key][1])
    print(f"{'layer (bundle count / onnxruntime count)':64s} {'bundle us':>10s} {'ort us':>9s} {'loss us':>8s}")
    for key in keys[:args.rows]:
        print(f"{key[:55]:55s} {ours[key][0]:3d}/{theirs[key][0]:<3d} {ours[key][1]:10.1f} {theirs[key][1]:9.1f} "
              f"{ours[key][1] - theirs[key][1]:8.1f}")
    total_ours, total_theirs = (sum(v[1] for v in table.values()) for table in (ours, theirs))
    print(f"{'total':64s} {total_ours:10.1f} {total_theirs:9.1f} {total_ours - total_theirs:8.1f}")


if __name__ == "__main__":
    main()
