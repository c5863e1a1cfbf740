"""Implementations: the named pieces of code that can compute a layer, each with the predicate saying where it
applies and a priority, so that one stage (exporters/glow/schedule/select.py) decides each layer's code once.

A layer has a *kind*: its op for a single node (``QConv``), ``<op>+group`` for a fused group headed by that op
(fuse.py), ``RowChain`` and ``PooledPair`` for the blocks of row_chains.py and pooled_pair.py. Every
implementation of a kind registers here with ``implementation(name, kind, family=..., priority=..., when=...)``
on its emitter: ``when(query)`` returns True where it applies, else False or a string saying why not; the
eligible implementation of highest priority is chosen (TVM's op strategies, TFLite Micro's reference kernels
against CMSIS-NN's, separate what a layer computes from how in the same way). ``params(query)`` may add the
facts the later stages need as an immutable ``Choice`` (e.g. how the weights are laid out), so packers,
workspace sizes, streams and emitters read the choice instead of guessing it back from a weight's dtype or rank.

The hooks of an implementation are keyed by its name: ``pack`` (the weights as the code reads them, applied by
the pack stage after selection), ``workspace`` (scratch bytes), ``stream`` and ``runtime_dims``
(kernels/registry.py documents those). ``family`` places it: reference (portable float), integer (portable
integer), fused (groups and blocks), x86, cortex_m. An op with one emitter (kernels/registry.py ``emitter``)
has one implementation named after the op. Every table refuses a second registration of the same key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FAMILIES = ("reference", "integer", "fused", "x86", "cortex_m")
#: a predicate's answer: True (applies), False or the reason it does not
Verdict = bool | str


@dataclass(frozen=True)
class Choice:
    """What the select stage decided for one layer: an implementation and its parameters (sorted pairs)."""

    impl: str
    params: tuple[tuple[str, Any], ...] = ()

    def param(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)

    @staticmethod
    def of(impl: str, params: dict[str, Any] | None = None) -> Choice:
        return Choice(impl, tuple(sorted((params or {}).items())))


@dataclass(frozen=True)
class Query:
    """What a predicate sees: the graph (weights' values included, as the importer laid them), the layer and the
    bundle's target (exporters/glow/target.py)."""

    graph: Any
    layer: Any
    target: Any
    #: types that differ from the graph's (a row chain's stage computes a band of rows: row_chains.py)
    types: tuple[tuple[str, Any], ...] = ()

    @property
    def node(self) -> Any:
        """The layer's head node."""
        return self.layer.nodes[0]

    def type_of(self, name: str) -> Any:
        if not name:
            return None
        return dict(self.types).get(name) or self.graph.type_of(name)


@dataclass
class Implementation:
    name: str
    kinds: tuple[str, ...]
    family: str
    priority: int
    when: Callable[[Query], Verdict]
    params: Callable[[Query], dict[str, Any]] | None
    emit: Callable[..., None]
    order: int = 0

    @property
    def summary(self) -> str:
        """The first line of the emitter's docstring."""
        doc = (self.emit.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""


def always(query: Query) -> Verdict:
    return True


_BY_NAME: dict[str, Implementation] = {}
_BY_KIND: dict[str, list[Implementation]] = {}
HOOKS = ("pack", "workspace", "stream", "runtime_dims", "pools_apart")


def register(name: str, kinds: tuple[str, ...], emit: Callable[..., None], *, family: str, priority: int = 0,
             when: Callable[[Query], Verdict] = always,
             params: Callable[[Query], dict[str, Any]] | None = None) -> Implementation:
    if family not in FAMILIES:
        raise ValueError(f"implementation {name}: family {family!r} is not one of {FAMILIES}")
    if name in _BY_NAME:
        raise ValueError(f"implementation {name} registered twice")
    impl = Implementation(name, kinds, family, priority, when, params, emit, len(_BY_NAME))
    _BY_NAME[name] = impl
    for kind in kinds:
        _BY_KIND.setdefault(kind, []).append(impl)
        _BY_KIND[kind].sort(key=lambda i: (-i.priority, i.order))
    return impl


def implementation(name: str, *kinds: str, family: str, priority: int = 0, when: Callable[[Query], Verdict] = always,
                   params: Callable[[Query], dict[str, Any]] | None = None) -> Callable:
    """Register the decorated emitter as implementation ``name`` of layers of ``kinds`` (module docstring)."""
    def decorate(fn: Callable[..., None]) -> Callable[..., None]:
        register(name, kinds, fn, family=family, priority=priority, when=when, params=params)
        return fn
    return decorate


def hook(what: str, *names: str) -> Callable:
    """Register the decorated function as the ``what`` hook (one of ``HOOKS``) of implementations ``names``
    (registered before or after: the hook waits for its implementation)."""
    if what not in HOOKS:
        raise ValueError(f"unknown hook {what!r}")

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        for name in names:
            table = _PENDING.setdefault(name, {})
            if what in table:
                raise ValueError(f"{what} of implementation {name} registered twice")
            table[what] = fn
        return fn
    return decorate


_PENDING: dict[str, dict[str, Callable[..., Any]]] = {}


def hook_of(name: str, what: str) -> Callable[..., Any] | None:
    return _PENDING.get(name, {}).get(what)


def run_hook(name: str, what: str, default: Any, *args: Any) -> Any:
    """Implementation ``name``'s ``what`` hook called with ``args``, or ``default`` when it has none."""
    fn = hook_of(name, what)
    return default if fn is None else fn(*args)


def implementations_of(kind: str) -> list[Implementation]:
    """The implementations of ``kind``, highest priority first."""
    return list(_BY_KIND.get(kind, ()))


def get_implementation(name: str) -> Implementation:
    return _BY_NAME[name]


def all_implementations() -> list[Implementation]:
    return sorted(_BY_NAME.values(), key=lambda i: (i.kinds, -i.priority, i.order))


def verdicts_of(query: Query) -> tuple[Implementation | None, list[tuple[str, str, Verdict]]]:
    """(the eligible implementation of highest priority for the layer of ``query``, or None; every candidate's
    (name, family, verdict)) — the one rule the select stage applies (exporters/glow/schedule/select.py)."""
    verdicts, chosen = [], None
    for impl in implementations_of(query.layer.kind):
        verdict = impl.when(query)
        verdicts.append((impl.name, impl.family, verdict))
        if chosen is None and verdict is True:
            chosen = impl
    return chosen, verdicts


def prefers_pooling_apart(query: Query) -> bool:
    """Whether the implementation the head of ``query`` (a layer of that node alone) gets runs faster with a
    pooling that reads it as a layer of its own (its ``pools_apart`` hook): fuse.py then leaves the pooling out
    of the group. The kernels must be registered (``import pegasus.exporters.glow.kernels``)."""
    if query.target is None:
        return False
    chosen, _ = verdicts_of(query)
    apart = hook_of(chosen.name, "pools_apart") if chosen is not None else None
    return apart is not None and bool(apart(query))


def implementation_for(query: Query) -> Implementation:
    """The implementation the select stage's rule gives the layer of ``query`` (a row chain's stages use it)."""
    chosen, verdicts = verdicts_of(query)
    if chosen is None:
        raise AssertionError(f"no implementation of {query.layer.kind} for '{query.node.name}': {verdicts}")
    return chosen


def choose(query: Query) -> Choice:
    """The ``Choice`` the select stage's rule makes for the layer of ``query``."""
    impl = implementation_for(query)
    return Choice.of(impl.name, impl.params(query) if impl.params else None)
