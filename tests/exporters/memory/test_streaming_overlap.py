"""A streaming convolution's output planned over its dying input (memory/plan.py, kernels.registry.Stream).

- ``overlap_bytes`` against the bytes the kernels' access order actually reads, enumerated tap by tap on
  random geometries (1-D to 3-D, strides, pads, dilations, channel counts): never below the least safe
  delta, and equal to it where no window starts in the padding of a dilated axis;
- chains pre -> layer -> post of channels-last QConv layers on adversarial geometries (stride 2 with pad 0
  and 1, dilation 2, a kernel taller than its stride, Cout > Cin, odd heights, 1-D and 3-D, depthwise with a
  multiplier): the layer's output placed exactly the aligned delta below its input, and the bundle byte for
  byte the reference interpreter's on random inputs; layers that must not overlap (channels first, batch 2,
  an input read again later, a grouped im2col layer, a fused float conv + relu + pool) keep apart; and the
  same chain planned with a delta two positions short gives wrong bytes (so these checks can fail);
- ``reuse_input_memory``: the inference really overwrites the input placeholder and still gives the
  reference's outputs; without it the input is intact.
"""

from __future__ import annotations

import itertools
import json
import subprocess

import numpy as np
import pytest

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.kernels.registry import Stream
from pegasus.exporters.glow.llvm.windows import Axis
from pegasus.exporters.glow.memory import plan as memory_plan
from pegasus.exporters.glow.memory.plan import align, overlap_bytes
from pegasus.exporters.glow.pipeline import stream_of
from pegasus.exporters.glow.target import resolve_target
from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor, TensorType
from pegasus.ir.verify import verify
from pegasus.ops.registry import get_op, make_attrs
from pegasus.runtime import interpreter
from tests.support.streaming import kept_apart, qconv, run_on_host
from tests.support.tflm import tflm_arena_bytes

RNG = np.random.default_rng(57)


# ---- overlap_bytes against the reads, enumerated --------------------------------------------------------


def _least_safe_delta(axes: list[Axis], in_bytes: int, out_bytes: int) -> int:
    """The smallest offset(input) - offset(output) at which writing output position p (in row-major order,
    after reading its window, before reading it again as a depthwise kernel's later channel blocks do)
    never hits an input byte read afterwards: every in-bounds tap of every window, enumerated."""
    positions = list(itertools.product(*(range(a.out) for a in axes)))
    in_strides = [int(np.prod([a.size for a in axes[i + 1:]])) for i in range(len(axes))]
    lowest = []
    for out in positions:
        taps = [[o * a.stride - a.pad + k * a.dilation for k in range(a.kernel)] for o, a in zip(out, axes)]
        taps = [[t for t in axis_taps if 0 <= t < a.size] for axis_taps, a in zip(taps, axes)]
        reads = [sum(t * s for t, s in zip(tap, in_strides)) for tap in itertools.product(*taps)]
        lowest.append(min(reads, default=None))
    delta = 0
    for p in range(len(positions)):
        later = [r for r in lowest[p:] if r is not None]
        if later:
            delta = max(delta, (p + 1) * out_bytes - min(later) * in_bytes)
    return delta


def _random_axes(rng: np.random.Generator, dilation: int) -> list[Axis]:
    axes = []
    for _ in range(rng.integers(1, 4)):
        size, kernel, stride = int(rng.integers(1, 8)), int(rng.integers(1, 5)), int(rng.integers(1, 4))
        pad = int(rng.integers(0, kernel))     # every window keeps a tap inside the input
        span = (kernel - 1) * dilation + 1
        out = (size + 2 * pad - span) // stride + 1
        if out < 1:
            return _random_axes(rng, dilation)
        axes.append(Axis(size, out, kernel, stride, dilation, pad))
    return axes


@pytest.mark.parametrize("dilation", [1, 2])
def test_overlap_bytes_is_the_least_safe_delta(dilation):
    rng = np.random.default_rng(dilation)
    for _ in range(150):
        axes = _random_axes(rng, dilation)
        in_bytes, out_bytes = int(rng.integers(1, 9)), int(rng.integers(1, 9))
        least = _least_safe_delta(axes, in_bytes, out_bytes)
        got = overlap_bytes(Stream(tuple(axes), in_bytes, out_bytes))
        if dilation == 1:
            assert got == least, (axes, in_bytes, out_bytes)
        else:   # a window starting in the padding reads its first tap later than the clamped origin
            assert got >= least, (axes, in_bytes, out_bytes)


def test_overlap_bytes_worked_examples():
    ds_cnn = Axis(25, 25, 3, 1, 1, 1), Axis(5, 5, 3, 1, 1, 1)
    assert overlap_bytes(Stream(ds_cnn, 64, 64)) == 7 * 64      # a row and two positions of 64 channels
    pointwise = Axis(12, 12, 1, 1, 1, 0), Axis(7, 7, 1, 1, 1, 0)
    assert overlap_bytes(Stream(pointwise, 64, 32)) == 32       # Cout <= Cin: one output position
    assert overlap_bytes(Stream(pointwise, 8, 16)) == 84 * 16 - 83 * 8     # Cout > Cin: grows with the tensor


# ---- chains of channels-last QConv layers in a bundle --------------------------------------------------


def _chain(graph: Graph, name: str, x_shape, w_shape, channels_last: bool = True, reread: bool = False,
           **geometry) -> tuple[str, str]:
    """input -> pre (1x1, keeps the channels) -> the layer -> post (1x1 to 4 channels) -> output; with
    ``reread`` the pre layer's output is read again after the layer. Returns (layer input, layer output)."""
    graph.tensors[f"{name}_x"] = Tensor(f"{name}_x", TensorType.of(np.zeros(x_shape, np.int8)))
    graph.inputs.append(f"{name}_x")
    channels = x_shape[-1] if channels_last else x_shape[1]
    pre = qconv(graph, f"{name}_pre", f"{name}_x", (channels, channels) + (1,) * (len(x_shape) - 2), channels_last)
    layer = qconv(graph, name, pre, w_shape, channels_last, **geometry)
    post = qconv(graph, f"{name}_post", layer, (4, w_shape[0]) + (1,) * (len(x_shape) - 2), channels_last)
    graph.outputs.append(post)
    if reread:
        again = qconv(graph, f"{name}_again", pre, (4, channels) + (1,) * (len(x_shape) - 2), channels_last)
        graph.outputs.append(again)
    return pre, layer


#: (name, channels-last input shape, weights, geometry): each layer's output overlaps its input
OVERLAPPING = [
    ("dw-ds-cnn", (1, 25, 5, 64), (64, 1, 3, 3), {"group": 64, "pads": (1, 1, 1, 1)}),
    ("dense-s2-pad0-odd", (1, 9, 7, 16), (16, 16, 3, 3), {"strides": (2, 2)}),
    ("dense-s2-pad1-odd", (1, 11, 6, 8), (24, 8, 3, 3), {"strides": (2, 2), "pads": (1, 1, 1, 1)}),
    ("dw-dilated", (1, 9, 8, 32), (32, 1, 3, 3), {"group": 32, "dilations": (2, 2), "pads": (2, 2, 2, 2)}),
    ("dense-tall-kernel", (1, 13, 5, 8), (16, 8, 5, 3), {"strides": (2, 1), "pads": (2, 1, 2, 1)}),
    ("pw-cout-gt-cin", (1, 12, 7, 16), (64, 16, 1, 1), {}),
    ("pw-cout-lt-cin", (1, 7, 7, 64), (32, 64, 1, 1), {}),
    ("dw-x2-s2", (1, 9, 9, 8), (16, 1, 3, 3), {"group": 8, "strides": (2, 2), "pads": (0, 0, 1, 1)}),
    ("dense-1d", (1, 25, 8), (16, 8, 3), {"pads": (1, 1)}),
    ("dense-3d", (1, 4, 5, 6, 8), (8, 8, 3, 3, 3), {"pads": (1, 1, 1, 1, 1, 1)}),
]


def _feeds(graph: Graph) -> dict[str, np.ndarray]:
    return {name: RNG.integers(-128, 128, graph.type_of(name).shape).astype(np.int8) for name in graph.inputs}


def _delta(graph: Graph, name: str) -> int:
    node = next(n for n in graph.nodes if n.name == name)
    stream = stream_of(graph, node.name, resolve_target(None, None, None, "pic"))
    return align(overlap_bytes(stream))


@pytest.mark.parametrize("name, x_shape, w_shape, geometry", OVERLAPPING, ids=[case[0] for case in OVERLAPPING])
def test_streaming_layer_overlaps_its_input_and_stays_exact(name, x_shape, w_shape, geometry, tmp_path):
    graph = Graph("overlap")
    source, out = _chain(graph, name, x_shape, w_shape, **geometry)
    verify(graph)
    feeds = _feeds(graph)
    plan, outputs, _, compiled = run_on_host(graph, feeds, tmp_path)
    assert not kept_apart(plan, source, out)
    assert plan.locations[source].offset - plan.locations[out].offset == _delta(compiled, name)
    np.testing.assert_array_equal(outputs[graph.outputs[0]], interpreter.run(graph, feeds)[graph.outputs[0]])


def test_layers_that_do_not_stream_keep_apart(tmp_path):
    graph, pairs = Graph("apart"), {}
    pairs["channels-first"] = _chain(graph, "first", (1, 16, 9, 7), (16, 16, 3, 3), channels_last=False,
                                     pads=(1, 1, 1, 1))
    pairs["batch-2"] = _chain(graph, "batch", (2, 9, 7, 16), (16, 16, 3, 3), pads=(1, 1, 1, 1))
    pairs["read-again"] = _chain(graph, "again", (1, 9, 7, 16), (16, 16, 3, 3), reread=True, pads=(1, 1, 1, 1))
    pairs["grouped"] = _chain(graph, "grouped", (1, 9, 7, 16), (16, 8, 3, 3), group=2, pads=(1, 1, 1, 1))
    verify(graph)
    feeds = _feeds(graph)
    plan, outputs, _, _ = run_on_host(graph, feeds, tmp_path)
    expected = interpreter.run(graph, feeds)
    for name, (source, out) in pairs.items():
        assert kept_apart(plan, source, out), name
    for name in graph.outputs:
        np.testing.assert_array_equal(outputs[name], expected[name], err_msg=name)


def test_fused_float_conv_and_pool_keep_apart(tmp_path):
    """Conv + Relu + MaxPool (fused, float, channels last) after a 1x1 Conv: the group's output does not
    overlap its input; the bundle matches the interpreter."""
    graph = Graph("fused")
    shapes = {"x": (1, 10, 8, 4), "w1": (4, 4, 1, 1), "w2": (8, 4, 3, 3)}
    graph.tensors["x"] = Tensor("x", TensorType.of(np.zeros(shapes["x"], np.float32)))
    graph.inputs.append("x")
    for name in ("w1", "w2"):
        graph.tensors[name] = Tensor.constant(name, RNG.standard_normal(shapes[name]).astype(np.float32))
    layers = [("Conv", ["x", "w1"], "t1", {}), ("Conv", ["t1", "w2"], "t2", {"pads": (1, 1, 1, 1)}),
              ("Relu", ["t2"], "t3", None), ("MaxPool", ["t3"], "y", {"kernel_shape": (2, 2), "strides": (2, 2)})]
    for op, inputs, out, attrs in layers:
        attrs = make_attrs(op, **({**attrs, "channels_last": True} if attrs is not None else {}))
        graph.tensors[out] = Tensor(out, get_op(op).infer(attrs, [graph.type_of(n) for n in inputs])[0])
        graph.nodes.append(Node(f"{op}_{out}", op, attrs, inputs, [out]))
    graph.outputs.append("y")
    verify(graph)
    feeds = {"x": RNG.standard_normal(shapes["x"]).astype(np.float32)}
    plan, outputs, _, _ = run_on_host(graph, feeds, tmp_path)
    assert [layer.op for layer in plan.layers] == ["Conv", "Conv_Relu_MaxPool"]
    assert plan.activations_size >= plan.locations["t1"].size     # t1 in the activations, y in MUTABLE
    np.testing.assert_allclose(outputs["y"], interpreter.run(graph, feeds)["y"], rtol=1e-5, atol=1e-5)


def test_a_delta_two_positions_short_gives_wrong_bytes(tmp_path, monkeypatch):
    """The check above can fail: planned two output positions too close, the DS-CNN depthwise layer
    overwrites inputs its next positions still read."""
    graph = Graph("short")
    name, x_shape, w_shape, geometry = OVERLAPPING[0]
    source, out = _chain(graph, name, x_shape, w_shape, **geometry)
    feeds = _feeds(graph)
    honest = overlap_bytes
    monkeypatch.setattr(memory_plan, "overlap_bytes", lambda stream: honest(stream) - 2 * stream.out_bytes)
    plan, outputs, _, _ = run_on_host(graph, feeds, tmp_path)
    assert plan.locations[source].offset - plan.locations[out].offset == 5 * 64
    assert not np.array_equal(outputs[graph.outputs[0]], interpreter.run(graph, feeds)[graph.outputs[0]])


@pytest.mark.parametrize("reuse", [True, False], ids=["reuse-input-memory", "input-kept"])
def test_reuse_input_memory_overwrites_the_input(reuse, tmp_path):
    graph = Graph("reuse")
    _chain(graph, "net", (1, 9, 7, 16), (16, 16, 3, 3), pads=(1, 1, 1, 1))
    verify(graph)
    feeds = _feeds(graph)
    plan, outputs, mutable, compiled = run_on_host(graph, feeds, tmp_path, reuse=reuse)
    loc = plan.locations[compiled.inputs[0]]
    after = np.frombuffer(mutable[loc.offset:loc.offset + loc.size].tobytes(), np.int8).reshape(feeds["net_x"].shape)
    assert plan.reuses_inputs == reuse and (plan.activations_size == 0) == reuse
    assert np.array_equal(after, feeds["net_x"]) != reuse
    np.testing.assert_array_equal(outputs[graph.outputs[0]], interpreter.run(graph, feeds)[graph.outputs[0]])


def test_example_program_of_a_reusing_bundle_runs_repeatedly(tmp_path):
    """main.c puts the overwritten inputs back before each run: three runs give the reference's bytes; the
    header and the memory report say that the inputs are overwritten."""
    graph = Graph("reuse")
    _chain(graph, "net", (1, 9, 7, 16), (16, 16, 3, 3), pads=(1, 1, 1, 1))
    feeds = _feeds(graph)
    export_bundle(graph, tmp_path, "net", resolve_target(None, None, None, "pic"), reuse_input_memory=True)
    assert "OVERWRITES the input placeholders" in (tmp_path / "net.h").read_text()
    assert "OVERWRITES the inputs" in (tmp_path / "net.memory.txt").read_text()
    make = subprocess.run(["make", "-B", "CFLAGS=-O2 -Wall -Werror"], cwd=tmp_path, capture_output=True, text=True)
    assert make.returncode == 0, make.stderr + make.stdout
    feeds["net_x"].tofile(tmp_path / "x.bin")
    run = subprocess.run(["./net_run", "-n", "3", "-o", "out.bin", "x.bin"], cwd=tmp_path, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    expected = interpreter.run(graph, feeds)[graph.outputs[0]]
    assert (tmp_path / "out.bin").read_bytes() == np.ascontiguousarray(expected).tobytes()


def test_cli_reuse_input_memory(tmp_path):
    """export glow --reuse-input-memory writes a bundle whose report says the inputs are overwritten (no
    activations buffer); pegasus run --reuse-input-memory runs it on the host exactly as the interpreter."""
    from pegasus.ir import serialize
    from tests.conftest import run_cli

    graph = Graph("reuse")
    _chain(graph, "net", (1, 9, 7, 16), (16, 16, 3, 3), pads=(1, 1, 1, 1))
    serialize.save(graph, tmp_path / "m.json", tmp_path / "m.data")
    np.save(tmp_path / "x.npy", _feeds(graph)["net_x"])
    model = ["--model", tmp_path / "m.json", "--model-data", tmp_path / "m.data"]
    for flags, overwritten in (([], False), (["--reuse-input-memory"], True)):
        result = run_cli("export", "glow", *model, "--output-path", tmp_path / f"b{overwritten}", *flags)
        assert result.code == 0, result.stderr
        report = json.loads((tmp_path / f"b{overwritten}" / "m.memory.json").read_text())
        assert report["inputs_overwritten"] == overwritten and (report["activations"] == 0) == overwritten
    result = run_cli("run", *model, "--input", tmp_path / "x.npy", "--reuse-input-memory")
    assert result.code == 0, result.stderr
    assert "largest difference 0\n" in result.stdout and "activations 0 B" in result.stdout, result.stdout


# ---- the MLPerf Tiny models -----------------------------------------------------------------------------


def _mlperf_builders():
    from tests.support import tflite_models as tq
    return [tq.int8_ds_cnn, tq.int8_mobilenet_v1, tq.int8_resnet8, tq.int8_autoencoder]


def _m7_plan(graph: Graph, reuse: bool):
    """The Cortex-M7 bundle's plan, as export_bundle makes it (the pipeline's stages up to the plan)."""
    from pegasus.exporters.glow.pipeline import schedule

    return schedule(graph, resolve_target("arm", "cortex-m7"), reuse).plan


def test_mlperf_ram_against_half_the_tflm_arena(lowered_models):
    """Issue 17: ACTIVATIONS + MUTABLE (Cortex-M7, integer I/O, the plan export_bundle makes: row chains
    included) at most half TFLite Micro's arena for every model with the inputs intact. MobileNetV1 0.25 (its
    input alone 27,648 B) meets it since its 1x1 8 -> 16 layer on 48x48, the stride-2 depthwise layer reading
    it and the 1x1 16 -> 32 after run row by row (row_chains._downsampling_pairs); ResNet-8 since its residual
    blocks do; --reuse-input-memory takes less still."""
    for builder in _mlperf_builders():
        path, graph = lowered_models(builder)
        arena = tflm_arena_bytes(path)
        ram = {reuse: (lambda plan: plan.activations_size + plan.mutable_size)(_m7_plan(graph, reuse))
               for reuse in (False, True)}
        print(f"{builder.__name__}: RAM {ram[False]:,} B, with --reuse-input-memory {ram[True]:,} B; TFLite Micro "
              f"arena {arena:,} B")
        assert ram[True] <= ram[False] <= arena // 2, builder.__name__


@pytest.mark.parametrize("builder", _mlperf_builders(), ids=lambda b: b.__name__)
def test_mlperf_model_reusing_its_input_equals_the_interpreter_on_host(builder, lowered_models, tmp_path):
    """Overlapping layers and --reuse-input-memory: the host bundle gives the reference interpreter's bytes
    (the default plan, overlaps included, is test_tflite_bundles.py's test against TFLite)."""
    _, graph = lowered_models(builder)
    feeds = _feeds(graph)
    _, outputs, _, _ = run_on_host(graph, feeds, tmp_path, reuse=True)
    expected = interpreter.run(graph, feeds)
    for name in graph.outputs:
        np.testing.assert_array_equal(outputs[name], expected[name], err_msg=name)


def test_mlperf_models_reusing_their_input_on_cortex_m7(lowered_models, tmp_path):
    """DS-CNN and MobileNetV1 0.25 bundles for Cortex-M7 (overlapping layers, --reuse-input-memory) run bare
    metal under qemu and give the reference interpreter's bytes."""
    from tests.support import tflite_models as tq
    from tests.support import toolchains

    for builder in (tq.int8_ds_cnn, tq.int8_mobilenet_v1):
        _, graph = lowered_models(builder)
        feeds = _feeds(graph)
        folder = tmp_path / builder.__name__
        export_bundle(graph, folder, "net", resolve_target("arm", "cortex-m7"), reuse_input_memory=True)
        spec = {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}
        outputs = toolchains.run_cortex_m(folder, "net", "cortex-m7", feeds, spec)
        expected = interpreter.run(graph, feeds)
        for name in graph.outputs:
            np.testing.assert_array_equal(outputs[name], expected[name], err_msg=f"{builder.__name__} {name}")


def test_memory_plan_drawing_shows_the_mutable_region_when_inputs_are_reused():
    from pegasus.exporters.glow.memory import plot as plan_plot
    from pegasus.exporters.glow.memory.plan import plan_memory

    graph = Graph("reuse")
    _chain(graph, "net", (1, 9, 7, 16), (16, 16, 3, 3), pads=(1, 1, 1, 1))
    plan = plan_memory(graph, reuse_input_memory=True)
    drawn = {name for buffer, _ in plan_plot.activation_buffers(plan) for name in buffer.tensors}
    assert {"net_x", "net_pre_y", "net_y", "net_post_y"} <= drawn
    assert all(plan.locations[name].region == "mutable" for name in drawn)
    assert plan_plot.render_memory_plan(graph, plan).startswith(b"\x89PNG")
