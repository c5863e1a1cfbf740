"""Quantized bundles against Glow's published int8 LeNet figures and against onnxruntime, same run.

For the demo LeNet quantized with each integer scheme (calibrated on 100 held-out digits):
- memory: CONSTANT / MUTABLE / ACTIVATIONS of the bundle (Glow int8: 433,152 / 3,200 / 15,232 bytes);
- code: .text + .rodata of NAME.o for cortex-m7 (Glow: 8,380 bytes);
- Cortex-M7 (qemu mps2-an500, ``-icount shift=0``): instructions per inference and MACs per instruction
  (LeNet ≈ 2.29 M MACs; Glow: 26 ms at 600 MHz ≈ 15.6 M cycles without CMSIS-NN, 10 ms ≈ 6 M with it);
- host: median latency of the bundle vs onnxruntime (1 thread) on the same model exported as QDQ ONNX.
Also whether the M7 object uses the DSP extension (SMLAD) — read from arm-none-eabi-objdump.

    python benchmarks/bench_quantized.py [--runs 300] [--schemes u8,pc8,dfp8,dfp16] [--skip-cortex-m]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "conversion_scripts" / "demo"))

from heldout import heldout_digits  # noqa: E402
from timing import median_us  # noqa: E402

from pegasus.exporters.glow.export import export_bundle  # noqa: E402
from pegasus.exporters.glow.memory.report import memory_report  # noqa: E402
from pegasus.exporters.glow.target import resolve_target  # noqa: E402
from pegasus.importers.onnx.loader import import_onnx  # noqa: E402
from pegasus.ir import serialize  # noqa: E402
from pegasus.quantized.lower import lower_to_integer  # noqa: E402
from pegasus.quantizers.assign import build_table  # noqa: E402
from pegasus.quantizers.calibrate import calibrate  # noqa: E402
from pegasus.quantizers.schemes import Scheme  # noqa: E402
from tests.support.host_runner import load_bundle  # noqa: E402

DEMO = ROOT / "conversion_scripts" / "demo" / "lenet_mnist.onnx"
SCHEMES = {"u8": ("asymmetric_affine", "uint8"), "pc8": ("perchannel_symmetric_affine", "int8"),
           "dfp8": ("dynamic_fixed_point", "int8"), "dfp16": ("dynamic_fixed_point", "int16")}
GLOW = {"constant": 433_152, "mutable": 3_200, "activations": 15_232, "code": 8_380, "cycles": 15_600_000}
MACS = 2_293_000


def quantized_lenet(scheme: str):
    graph = import_onnx(DEMO, name="lenet_mnist")
    images, _ = heldout_digits()
    samples = [{"data": image[None]} for image in images[-100:]]
    chosen = Scheme.of(*SCHEMES[scheme])
    calibration = calibrate(graph, samples, total=len(samples), batch_size=10, signed=chosen.qtype != "u8",
                            progress=False)
    table = build_table(graph, calibration.ranges, chosen, algorithm="normal", digest=serialize.graph_digest(graph))
    return graph, table, lower_to_integer(graph, table).graph


def cortex_m7(graph, image) -> dict:
    from tests.support.toolchains import count_instructions_cortex_m, run_cortex_m_detailed

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        result = export_bundle(graph, folder, "lenet_mnist", resolve_target("arm", "cortex-m7"))
        report = json.loads(memory_report("lenet_mnist", result.plan, (folder / "lenet_mnist.o").read_bytes())[1])
        disassembly = subprocess.run(["arm-none-eabi-objdump", "-d", str(folder / "lenet_mnist.o")],
                                     capture_output=True, text=True).stdout
        instructions = count_instructions_cortex_m(folder, "lenet_mnist", "cortex-m7", {"data": image})
        stack = run_cortex_m_detailed(folder, "lenet_mnist", "cortex-m7", {"data": image}, {}).stack
    plan = result.plan
    return {"constant": plan.constant_size, "mutable": plan.mutable_size, "activations": plan.activations_size,
            "code": report["code"], "instructions": instructions, "stack": stack,
            "smlad": disassembly.count("smlad"), "report": report}


def host_vs_onnxruntime(onnx_graph, table, lowered, image, runs: int) -> tuple[float, float]:
    import onnxruntime as ort

    from pegasus.quantizers.qdq_onnx import to_qdq_onnx

    qdq = to_qdq_onnx(DEMO, onnx_graph, table)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(qdq.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {"data": image}
    with tempfile.TemporaryDirectory() as tmp:
        ours = median_us(load_bundle(lowered, feeds, Path(tmp)), runs)
    theirs = median_us(lambda: session.run(None, feeds), runs)
    return ours, theirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--schemes", default=",".join(SCHEMES))
    parser.add_argument("--skip-cortex-m", action="store_true")
    args = parser.parse_args()
    image = heldout_digits()[0][0][None]
    print(f"{'scheme':8s} {'bundle µs':>10s} {'ort QDQ µs':>11s} {'ort/bundle':>10s}   {'CONSTANT':>9s} "
          f"{'MUTABLE':>8s} {'ACTIV.':>7s} {'stack':>6s} {'code M7':>8s} {'M7 instr.':>11s} {'MAC/instr':>9s} "
          f"{'SMLAD':>5s}")
    for scheme in args.schemes.split(","):
        graph, table, lowered = quantized_lenet(scheme)
        ours, theirs = host_vs_onnxruntime(graph, table, lowered, image, args.runs)
        m7 = {} if args.skip_cortex_m else cortex_m7(lowered, image)
        line = f"{scheme:8s} {ours:10.1f} {theirs:11.1f} {theirs / ours:9.2f}x"
        if m7:
            line += (f"   {m7['constant']:9,d} {m7['mutable']:8,d} {m7['activations']:7,d} {m7['stack']:6,d} "
                     f"{m7['code']!s:>8s} "
                     f"{m7['instructions']:11,d} {MACS / m7['instructions']:9.3f} {m7['smlad']:5d}")
        print(line)
    print(f"\nGlow int8 LeNet: CONSTANT {GLOW['constant']:,} MUTABLE {GLOW['mutable']:,} ACTIVATIONS "
          f"{GLOW['activations']:,} (20,992 with CMSIS-NN), code {GLOW['code']:,} B on cortex-m7, 26 ms at 600 MHz "
          f"≈ {GLOW['cycles']:,} cycles (10 ms ≈ 6 M with CMSIS-NN)")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
