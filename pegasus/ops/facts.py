"""Asking the registry what an op is, by name: the facts each op declares once in its ``OpDef`` (``registry.py``:
value-preserving, grid-tied, clamp, tabulable, affine, fusable pooling, residual sum, vector-safe, bias input,
weight axis, quantized form). Quantizers, integer rules, passes and exporters read these instead of keeping lists
of op names."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from pegasus.ops.registry import all_ops, get_op


@dataclass(frozen=True)
class OpFacts:
    """What the later stages need to know about one op (``OpDef``'s fact attributes, documented there)."""

    value_preserving: bool
    #: the output takes input 0's grid: ``value_preserving`` or ``keeps_input_grid``
    tied: bool
    clamp: bool
    tabulable: bool
    channel_affine: tuple[tuple[int, ...], str] | None
    fusable_pool: bool
    residual_sum: bool
    vector_safe: bool
    bias_input: int | None
    quantized_form: bool


_FACTS: dict[str, OpFacts] = {}


def op_facts(op: str) -> OpFacts:
    """The facts of registry op ``op`` (KeyError naming it when it is not in the registry)."""
    if op not in _FACTS:
        cls = get_op(op)
        _FACTS[op] = OpFacts(
            value_preserving=cls.value_preserving, tied=cls.value_preserving or cls.keeps_input_grid, clamp=cls.clamp,
            tabulable=cls.tabulable, channel_affine=cls.channel_affine, fusable_pool=cls.fusable_pool,
            residual_sum=cls.residual_sum, vector_safe=cls.vector_safe, bias_input=cls.bias_input,
            quantized_form=cls.quantized_form)
    return _FACTS[op]


def ops_with(fact: str) -> tuple[str, ...]:
    """The names of the ops whose ``fact`` (an ``OpFacts`` field) is set (true, or not None), sorted."""
    if fact not in {f.name for f in fields(OpFacts)}:
        raise KeyError(f"'{fact}' is not an op fact (the facts: {[f.name for f in fields(OpFacts)]})")
    return tuple(name for name in all_ops() if getattr(op_facts(name), fact) not in (False, None))


def has_fact(op: str, fact: str) -> bool:
    """Whether ``op`` has ``fact``; an op name the registry does not hold (a fused layer's) has none."""
    try:
        return getattr(op_facts(op), fact) not in (False, None)
    except KeyError:
        return False


def weight_axis(op: str, attrs: Any, index: int, rank: int) -> int | None:
    """The output-channel axis of input ``index`` (of rank ``rank``) of an ``op`` layer when it is its weight."""
    return get_op(op).weight_axis(attrs, index, rank)


def is_bias(op: str, index: int) -> bool:
    """Whether input ``index`` of an ``op`` layer is its bias."""
    return op_facts(op).bias_input == index
