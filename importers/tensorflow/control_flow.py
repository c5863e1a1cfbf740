"""What the TensorFlow loader knows of a graph's control flow before converting it: the value of a tensor that
is a constant or a ``--predef-file`` value (through Identity-like ops), and which tensors are dead.

TF1's ``tf.cond`` (and TF2's once lowered) is a Switch per input: output 0 carries the data when the predicate is
false, output 1 when it is true; the other output is dead, and so is every node reading a dead tensor, by data
or by control input (a branch's constants wait on its pivot through a control edge), except a Merge, which is
dead only when all its inputs are. When the predicate is known before conversion the untaken branch is
skipped whole, so ops pegasus cannot convert (a training branch's RandomUniform) are never asked for. The same
knowledge picks the branch of an If/StatelessIf (nodes.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pegasus.importers.tensorflow.ops.control import PASS_THROUGH
from pegasus.importers.tensorflow.reader import TfModel


def known_values(model: TfModel, predef: dict[str, np.ndarray], stop: set[str]) -> Callable[[str], np.ndarray | None]:
    """A tensor's value when known before conversion (a constant or predef value, through pass-through ops)."""
    def value_of(tensor: str) -> np.ndarray | None:
        seen = set()        # pass-through nodes reading each other in a cycle (a damaged graph): not known
        while tensor not in predef:
            value = model.value(tensor) if tensor not in stop else None
            node = model.producer(tensor)
            if value is not None or node is None or node.op_type not in PASS_THROUGH or tensor in seen:
                return value
            seen.add(tensor)
            tensor = node.inputs[0]
        return predef[tensor]
    return value_of


class Deadness:
    """``dead(tensor)``: the tensor lies on the untaken side of a Switch whose predicate ``value_of`` knows."""

    def __init__(self, model: TfModel, value_of: Callable[[str], np.ndarray | None], stop: set[str]):
        self.model, self.value_of, self.stop = model, value_of, stop
        self.memo: dict[str, bool] = {}

    def _dependencies(self, tensor: str) -> list[str]:
        if tensor in self.stop:
            return []
        node = self.model.producer(tensor)
        owner = node.name if node is not None else tensor     # a Const is named like its tensor
        return [t for t in (node.inputs if node is not None else []) if t] + self.model.control.get(owner, [])

    def _rule(self, tensor: str) -> bool:
        if tensor in self.stop:
            return False
        node = self.model.producer(tensor)
        dependencies = self._dependencies(tensor)
        if node is not None and node.op_type == "Merge":
            data = [t for t in node.inputs if t]
            return bool(data) and all(self.memo[t] for t in data)
        if any(self.memo[t] for t in dependencies):
            return True
        if node is not None and node.op_type == "Switch" and len(node.outputs) == 2:
            predicate = self.value_of(node.inputs[1])
            return predicate is not None and tensor == node.outputs[0 if np.asarray(predicate).reshape(-1)[0] else 1]
        return False

    def dead(self, tensor: str) -> bool:
        stack, visiting = [tensor], set()
        while stack:
            current = stack[-1]
            if current in self.memo:
                stack.pop()
                continue
            pending = [t for t in self._dependencies(current) if t not in self.memo]
            if any(t in visiting for t in pending):        # a loop: not a Switch TF would resolve here
                self.memo[current] = False
            elif pending:
                visiting.add(current)
                stack.extend(pending)
                continue
            else:
                self.memo[current] = self._rule(current)
            stack.pop()
        return self.memo[tensor]

    def node_dead(self, node) -> bool:
        """Every output of the node is dead (a Switch is alive while either of its outputs is)."""
        return all(self.dead(t) for t in node.outputs)
