"""The implementations of the layers grouping builds out of several convolutions: a residual block computed row
by row (row_chains.py, row_emit.py) and two convolutions with their poolings computed as one (pooled_pair.py,
kernels/cortex_m/integer_pooled_pair.py). Each has one implementation; its hooks read the block the grouping stage made.
"""

from __future__ import annotations

from pegasus.exporters.glow.fuse import Layer
from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.cortex_m.integer_pooled_pair import emit_pooled_pair
from pegasus.exporters.glow.kernels.registry import workspace
from pegasus.exporters.glow.kernels.strategy import Choice, Query, choose, hook, implementation, run_hook
from pegasus.exporters.glow.row_chains import ROW_CONVS
from pegasus.exporters.glow.row_emit import emit_row_chain


def stage_choices(query: Query) -> dict[str, tuple[tuple[str, Choice], ...]]:
    """Each convolution of the block with the implementation the select stage's rule gives it as a layer of its
    own, chosen before its weights are laid for it (``pack_row_chain``) and read when the block is emitted."""
    return {"stages": tuple((node.name, choose(Query(query.graph, Layer([node]), query.target)))
                            for node in query.layer.nodes if node.op in ROW_CONVS)}


def chosen_stages(choice: Choice) -> dict[str, Choice]:
    return dict(choice.param("stages", ()))


@implementation("row_chain", "RowChain", family="fused", params=stage_choices)
def row_chain(k: KernelContext) -> None:
    """A residual block computed a band of rows at a time: each stage's function called per row."""
    function = k.builder.function
    emit_row_chain(function, k.builder, k.graph, k.layer, k.refs, k.math, k.target,
                   k.workspace, k.parameters, k.share, chosen_stages(k.choice))


@workspace("row_chain")
def row_chain_workspace(k: KernelContext) -> int:
    """The rows kept of each tensor inside the block, then the largest stage's scratch."""
    return k.layer.workspace_layout(k.graph, k.target, chosen_stages(k.choice))[2]


@hook("pack", "row_chain")
def pack_row_chain(query: Query, choice: Choice) -> list[tuple[str, dict[int, object], str]]:
    """Each convolution of the block with its weights laid as its own implementation reads them."""
    laid, stages = [], chosen_stages(choice)
    for node in query.layer.nodes:
        if node.name in stages:
            laid += run_hook(stages[node.name].impl, "pack", [], Query(query.graph, Layer([node]), query.target),
                             stages[node.name])
    return laid


@implementation("pooled_pair", "PooledPair", family="cortex_m")
def pooled_pair(k: KernelContext) -> None:
    """Two QConv + MaxPool groups as one layer: the first's pooled rows streamed through a ring into the second."""
    emit_pooled_pair(k.builder, k.graph, k.layer, k.refs, k.math, k.target, k.workspace, k.parameters)


@workspace("pooled_pair")
def pooled_pair_workspace(k: KernelContext) -> int:
    return k.layer.workspace_bytes()


@hook("pack", "pooled_pair")
def pack_pooled_pair(query: Query, choice: Choice) -> list[tuple[str, dict[int, object], str]]:
    """Both convolutions' weights as the pair's kernel reads them, by the plan grouping made (pooled_pair.py)."""
    plan, graph = query.layer.plan, query.graph
    first, second = plan.first.lay(graph.value_of(plan.a.inputs[1])), plan.second.lay(graph.value_of(plan.b.inputs[1]))
    assert first is not None and second is not None, f"pooled pair '{query.node.name}': its weights cannot be laid"
    return [(plan.a.name, {1: first}, "paired"), (plan.b.name, {1: second}, "paired")]
