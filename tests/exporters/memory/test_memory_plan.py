"""The static memory plan: LeNet's sizes against Glow's (unfused: one layer per node, as Glow plans it;
the fused plan is in test_fusion.py), and, for every light model planned unfused and fused, that no two
tensors alive at the same time share bytes unless one is an alias or in-place rewrite of the other, or a
Concat input built in place in its output (memory/plan.py ``concat_in_place``, at its slice), and that the
tensors inside a fused layer get no memory at all."""

from __future__ import annotations

import os

import onnx
import pytest

from pegasus.exporters.glow.fuse import fuse_layers, single_layers
from pegasus.exporters.glow.memory.plan import ACTIVATIONS, CONSTANT, MUTABLE, concat_slices, plan_memory
from pegasus.importers.onnx.loader import import_onnx
from pegasus.ops.registry import get_op

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
LIGHT = sorted(f for f in os.listdir(LIGHT_DIR) if f.endswith(".onnx"))


def test_lenet_sizes_beat_or_match_glow(demo_onnx):
    graph = import_onnx(demo_onnx)
    plan = plan_memory(graph, single_layers(graph))
    print(f"LeNet float: constant {plan.constant_size}, mutable {plan.mutable_size}, "
          f"activations {plan.activations_size} (Glow: 1724672 / 3200 / 57600)")
    assert plan.mutable_size == 3200
    assert plan.activations_size <= 57600
    assert plan.constant_size <= 1724672
    for loc in plan.locations.values():  # buffers at Glow's 64 bytes; constants below 16 KiB at 16
        assert loc.offset % (16 if loc.region == "constant" and loc.size < 16384 else 64) == 0


def _live_ranges(graph, layers):
    last = {}
    first = {name: -1 for name in graph.inputs}
    for index, layer in enumerate(layers):
        for name in layer.present_inputs():
            last[name] = index
        for name in layer.outputs:
            if name:
                first[name] = index
    end = len(layers)
    return {name: (start, end if name in graph.outputs else last.get(name, start)) for name, start in first.items()}


def _related(graph, a, b):
    """True when b is written by an alias/in-place layer from a (or the reverse), transitively."""
    links = {}
    for node in graph.nodes:
        opdef = get_op(node.op)
        if (opdef.alias or opdef.inplace) and node.inputs and node.inputs[0]:
            links.setdefault(node.outputs[0], set()).add(node.inputs[0])
            links.setdefault(node.inputs[0], set()).add(node.outputs[0])
    seen, stack = {a}, [a]
    while stack:
        for other in links.get(stack.pop(), ()):
            if other not in seen:
                seen.add(other)
                stack.append(other)
    return b in seen


def _built_in(plan, graph, layers) -> dict[str, set[str]]:
    """For each tensor, the tensors it lies inside as a Concat input placed at its slice of the output,
    transitively (through nested Concats and aliases of the output); each such placement checked exact."""
    inside: dict[str, set[str]] = {}
    for layer in layers:
        starts = concat_slices(graph, layer)
        y = plan.locations.get(layer.outputs[0])
        for x, start in zip(layer.inputs, starts or []):
            loc = plan.locations.get(x)
            if loc is not None and y is not None and loc.region == y.region and 0 <= loc.offset - y.offset < y.size:
                assert loc.offset == y.offset + start, f"{x} is inside {layer.outputs[0]} but not at its slice"
                inside.setdefault(x, set()).add(layer.outputs[0])
    for node in graph.nodes:
        if get_op(node.op).alias and node.inputs and node.inputs[0]:
            inside.setdefault(node.inputs[0], set()).add(node.outputs[0])
    changed = True
    while changed:
        changed = False
        for outer in inside.values():
            more = set().union(*(inside.get(o, set()) for o in outer)) - outer
            if more:
                outer |= more
                changed = True
    return inside


@pytest.mark.parametrize("concat", [False, True], ids=["copied", "built"])
@pytest.mark.parametrize("fuse", [False, True], ids=["unfused", "fused"])
@pytest.mark.parametrize("file", LIGHT + ["demo"])
def test_live_tensors_never_overlap(file, fuse, concat, demo_onnx):
    graph = import_onnx(demo_onnx if file == "demo" else os.path.join(LIGHT_DIR, file))
    layers = fuse_layers(graph) if fuse else single_layers(graph)
    plan = plan_memory(graph, layers, concat_in_place=concat)
    assert plan.layers == layers
    built = _built_in(plan, graph, layers)
    ranges = _live_ranges(graph, layers)
    inside = {node.outputs[0] for layer in layers for node in layer.nodes[:-1]}
    assert not inside & set(plan.locations)
    names = sorted(ranges)
    for i, a in enumerate(names):
        la = plan.locations[a]
        for b in names[i + 1:]:
            lb = plan.locations[b]
            if la.region != lb.region or la.region == CONSTANT:
                continue
            (sa, ea), (sb, eb) = ranges[a], ranges[b]
            if sa > eb or sb > ea:  # never alive together
                continue
            overlap = la.offset < lb.offset + lb.size and lb.offset < la.offset + la.size
            contained = a in built.get(b, ()) or b in built.get(a, ())
            assert not overlap or contained or _related(graph, a, b), f"{a} and {b} overlap while both alive"
    for name in graph.inputs + graph.outputs:
        assert plan.locations[name].region == MUTABLE
    for tensor in graph.constants():
        assert plan.locations[tensor.name].region == CONSTANT
    sizes = {ACTIVATIONS: plan.activations_size, MUTABLE: plan.mutable_size, CONSTANT: plan.constant_size}
    for loc in plan.locations.values():
        assert loc.offset + loc.size <= sizes[loc.region]


@pytest.mark.parametrize("file", ["light_inception_v1.onnx", "demo"])
def test_workspaces_never_overlap_a_live_tensor(file, demo_onnx):
    """A layer's workspace (kernel scratch) lies in ACTIVATIONS, apart from every tensor alive at that layer."""
    from pegasus.exporters.glow.memory.plan import workspace_name

    graph = import_onnx(demo_onnx if file == "demo" else os.path.join(LIGHT_DIR, file))
    layers = single_layers(graph)
    workspaces = {index: 1000 + 37 * index for index in range(0, len(layers), 3)}
    plan = plan_memory(graph, layers, workspaces)
    without = plan_memory(graph, layers)
    assert plan.activations_size >= without.activations_size
    ranges = _live_ranges(graph, layers)
    for index, size in workspaces.items():
        scratch = plan.locations[workspace_name(layers[index])]
        assert (scratch.region, scratch.size) == (ACTIVATIONS, size)
        assert scratch.offset % 64 == 0 and scratch.offset + size <= plan.activations_size
        for name, (start, end) in ranges.items():
            loc = plan.locations[name]
            if loc.region == ACTIVATIONS and start <= index <= end:
                assert loc.offset + loc.size <= scratch.offset or scratch.offset + size <= loc.offset, name
