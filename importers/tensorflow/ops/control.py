"""TensorFlow converters for graph plumbing, which imports as nothing or as an Identity that the import passes
remove: Identity, IdentityN, Snapshot, StopGradient, PreventGradient, CheckNumerics, EnsureShape,
ReadVariableOp (a variable's value is a constant read from the checkpoint), PlaceholderWithDefault that is not
an input (its default), and Switch/Merge on a predicate known at compile time (TF1's ``tf.cond``: the taken
side of the Switch passes its input, the other is dead, and a Merge passes its one live input; the loader
skips every node that reads a dead tensor, control_flow.py). An If whose predicate is known is a call of
its branch, inlined by the reader.

Placeholders that are inputs, or take a value from ``--predef-file``, never reach a converter; one that gets
here has neither, and neither has a variable missing from the checkpoint: both are errors naming the node.
"""

from __future__ import annotations

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.tensorflow.context import TfContext, converter

#: ops that pass their input 0 through
PASS_THROUGH = ("Identity", "Snapshot", "StopGradient", "PreventGradient", "CheckNumerics", "EnsureShape",
                "ReadVariableOp", "PlaceholderWithDefault")


@converter(*PASS_THROUGH)
def identity(ctx: TfContext, node: SourceNode) -> None:
    ctx.emit("Identity", [node.inputs[0]], node=node, outputs=node.outputs[:1])


@converter("IdentityN")
def identity_n(ctx: TfContext, node: SourceNode) -> None:
    for index, (x, out) in enumerate(zip(node.inputs, node.outputs)):
        ctx.emit("Identity", [x], node=node, outputs=[out], suffix=f"/{index}" if index else "")


@converter("Placeholder")
def placeholder(ctx: TfContext, node: SourceNode) -> None:
    raise PegasusError(f"placeholder '{node.name}' is needed but is not among --inputs and has no value in "
                       "--predef-file")


@converter("VarHandleOp", "VariableV2", "Variable")
def variable(ctx: TfContext, node: SourceNode) -> None:
    raise PegasusError(f"{node.describe()}: the variable has no value (no checkpoint holds it; a frozen graph "
                       "should have none: freeze it with convert_variables_to_constants)")


def _predicate(ctx: TfContext, node: SourceNode) -> bool:
    value = ctx.value(node.inputs[1])
    if value is None:
        raise PegasusError(f"{node.describe()}: its predicate '{node.inputs[1]}' is only known at run time; give "
                           "the placeholder it depends on a value with --predef-file")
    return bool(np.asarray(value).reshape(-1)[0])


@converter("Switch")
def switch(ctx: TfContext, node: SourceNode) -> None:
    """Switch(data, pred): output 0 is data when pred is false, output 1 when it is true; the other is dead."""
    taken = 1 if _predicate(ctx, node) else 0
    ctx.emit("Identity", [node.inputs[0]], node=node, outputs=[node.outputs[taken]])
    ctx.dead.add(node.outputs[1 - taken])


@converter("Merge")
def merge(ctx: TfContext, node: SourceNode) -> None:
    """Merge of the live inputs only (the loader drops dead ones and records which input was live)."""
    if len(node.inputs) != 1:
        raise PegasusError(f"{node.describe()}: {len(node.inputs)} of its inputs are live; pegasus imports a "
                           "Merge whose Switch predicates are known at compile time (one live input)")
    ctx.emit("Identity", [node.inputs[0]], node=node, outputs=node.outputs[:1])
    if len(node.outputs) > 1:
        ctx.builder.set_constant(node.outputs[1], np.array(node.attrs.get("_value_index", 0), np.int32))
