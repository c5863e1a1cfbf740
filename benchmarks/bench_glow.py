"""Float bundle speed against a peer measured in the same run.

For the demo LeNet and the nine light models in the onnx wheel: the median latency of the host bundle
(exported for this machine, linked into a shared library, called through ctypes) and of onnxruntime
with one thread (also called from Python), the two called alternately round by round, and the median of the
rounds' ratios (onnxruntime / bundle). Then the time ``export_bundle`` (what
``pegasus export glow`` does after loading the model) takes on DenseNet-121 (``--export-model``), wall clock
and CPU, and issue 17's two targets: ort/bundle >= 1.0 on every light model, that export under 10 s.
For LeNet on Cortex-M7 (qemu mps2-an500, ``-icount shift=0``): instructions per inference, and the code
size of NAME.o for that CPU.

    python benchmarks/bench_glow.py [--runs 200] [--models lenet,resnet50,...] [--export-model densenet121]
        [--skip-cortex-m]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx.backend.test.runner import Runner

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from timing import paired_us  # noqa: E402

from pegasus.exporters.glow.export import export_bundle  # noqa: E402
from pegasus.exporters.glow.target import resolve_target  # noqa: E402
from pegasus.importers.onnx.loader import import_onnx  # noqa: E402
from tests.support.host_runner import load_bundle  # noqa: E402

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
DEMO = ROOT / "conversion_scripts" / "demo" / "lenet_mnist.onnx"


def models() -> dict[str, Path]:
    found = {"lenet": DEMO}
    for path in sorted(LIGHT_DIR.glob("light_*.onnx")):
        found[path.stem[len("light_"):]] = path
    return found


def feeds_for(model: onnx.ModelProto, name: str) -> dict[str, np.ndarray]:
    initializers = {init.name for init in model.graph.initializer}
    return {vi.name: Runner.generate_dummy_data(vi, seed=0, name=name, random=False)
            for vi in model.graph.input if vi.name not in initializers}


def host_rows(names: list[str], runs: int) -> list[dict]:
    rows = []
    for name in names:
        path = models()[name]
        model = onnx.load(str(path))
        feeds = feeds_for(model, name) if name != "lenet" else {
            "data": np.random.default_rng(0).uniform(0, 1, (1, 1, 28, 28)).astype(np.float32)}
        graph = import_onnx(model, name=name)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        with tempfile.TemporaryDirectory() as tmp:
            ours, theirs, speedup = paired_us(load_bundle(graph, feeds, Path(tmp)),
                                              lambda s=session, f=feeds: s.run(None, f), runs)
        rows.append({"model": name, "bundle_us": ours, "onnxruntime_us": theirs, "speedup": speedup})
    return rows


def export_seconds(name: str) -> tuple[float, float]:
    """(wall, CPU) seconds of one ``export_bundle`` of light model ``name`` for this machine."""
    graph = import_onnx(onnx.load(str(models()[name])), name=name)
    with tempfile.TemporaryDirectory() as tmp:
        wall, cpu = time.perf_counter(), time.process_time()
        export_bundle(graph, Path(tmp), "net", resolve_target(None, None, None, "pic"))
        return time.perf_counter() - wall, time.process_time() - cpu


def cortex_m7_row() -> dict:
    from pegasus.exporters.glow.memory.report import memory_report
    from tests.support.toolchains import count_instructions_cortex_m

    graph = import_onnx(DEMO, name="lenet_mnist")
    image = np.random.default_rng(0).uniform(0, 1, (1, 1, 28, 28)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        result = export_bundle(graph, Path(tmp), "lenet_mnist", resolve_target("arm", "cortex-m7"))
        instructions = count_instructions_cortex_m(Path(tmp), "lenet_mnist", "cortex-m7", {"data": image})
        report = json.loads(memory_report("lenet_mnist", result.plan, (Path(tmp) / "lenet_mnist.o").read_bytes())[1])
    macs = 2_293_000
    return {"instructions": instructions, "macs_per_instruction": macs / instructions, "report": report}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--models", default=",".join(models()))
    parser.add_argument("--export-model", default="densenet121", help="light model whose export is timed ('' skips)")
    parser.add_argument("--skip-cortex-m", action="store_true")
    args = parser.parse_args()
    rows = host_rows(args.models.split(","), args.runs)
    print(f"{'model':16s} {'bundle µs':>12s} {'onnxruntime µs':>15s} {'ort/bundle':>11s}")
    for row in rows:
        print(f"{row['model']:16s} {row['bundle_us']:12.1f} {row['onnxruntime_us']:15.1f} {row['speedup']:10.2f}x")
    slower = [f"{row['model']} {row['speedup']:.2f}x" for row in rows if row["speedup"] < 1.0]
    verdict = f"MISS ({', '.join(slower)})" if slower else "PASS"
    print(f"\ntarget ort/bundle >= 1.0 on every model above: {verdict}")
    if args.export_model:
        wall, cpu = export_seconds(args.export_model)
        print(f"export of {args.export_model}: {wall:.1f} s wall, {cpu:.1f} s CPU; target < 10 s: "
              f"{'PASS' if wall < 10 else 'MISS'}")
    if not args.skip_cortex_m:
        m7 = cortex_m7_row()
        print(f"\nLeNet float on Cortex-M7 (qemu mps2-an500, -icount shift=0): {m7['instructions']:,} instructions "
              f"per inference, {m7['macs_per_instruction']:.3f} MACs/instruction (2.29 M MACs)")
        print(f"memory report: {json.dumps(m7['report'])}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
