"""The order in which passes run at import; the IR is verified after every one of them."""

from __future__ import annotations

from collections.abc import Callable

from pegasus.ir.graph import Graph
from pegasus.ir.verify import verify
from pegasus.passes.cse import eliminate_common_subexpressions
from pegasus.passes.dce import eliminate_dead_code
from pegasus.passes.fold_batchnorm import fold_batchnorm
from pegasus.passes.fold_channel_affine import fold_channel_affine
from pegasus.passes.fold_constants import fold_constants
from pegasus.passes.infer_shapes import infer_shapes
from pegasus.passes.remove_identity import remove_identity

Pass = Callable[[Graph], bool]

IMPORT_PASSES: list[Pass] = [
    fold_constants,
    remove_identity,
    eliminate_common_subexpressions,     # before folding: BatchNorms then stay off a shared convolution
    fold_batchnorm,
    fold_channel_affine,
    fold_constants,
    eliminate_dead_code,
    infer_shapes,
]


def run_passes(graph: Graph, passes: list[Pass]) -> Graph:
    verify(graph, after="import")
    for apply in passes:
        apply(graph)
        verify(graph, after=apply.__name__)
    return graph


def run_import_passes(graph: Graph, *, optimize: bool = True) -> Graph:
    """Canonical passes every importer's output goes through (``optimize=False`` keeps the graph as is
    but still infers shapes, for debugging an importer)."""
    return run_passes(graph, IMPORT_PASSES if optimize else [eliminate_dead_code, infer_shapes])
