"""The kernel registries (exporters/glow/kernels/registry.py and what it registers into) refuse a second
registration for the same key: a second ``@workspace("QConv")`` would otherwise silently replace the first and
change which bytes a layer gets."""

import sys

import pytest

from pegasus.exporters.glow.kernels import registry

DECORATORS = {
    "emitter": registry.emitter,
    "packer": registry.packer,
    "workspace": registry.workspace,
    "streams": registry.streams,
    "runtime_dims": registry.runtime_dims,
    "group_emitter": registry.group_emitter,
}
#: the modules whose tables the decorators fill (the registry and the modules it registers into)
TABLE_MODULES = {registry.__name__, *(fn.__module__ for fn in DECORATORS.values())}


def _tables() -> list[tuple[object, str]]:
    """(module, name) of every dict held at module level by the registry's modules."""
    modules = {sys.modules[name] for name in TABLE_MODULES}
    modules |= {module for module in list(sys.modules.values())
                if getattr(module, "__name__", "").startswith("pegasus.exporters.glow.kernels.")
                and any(getattr(module, name, None) is getattr(registry, name, object())
                        for name in ("register", "hook"))}
    return [(module, name) for module in modules for name, value in vars(module).items()
            if isinstance(value, dict) and name.startswith("_") and not name.startswith("__")]


def _size(value) -> int:
    """Entries of a table, nested tables counted through."""
    if isinstance(value, dict):
        return sum(1 + _size(item) for item in value.values())
    return len(value) if isinstance(value, list) else 0


@pytest.fixture
def fresh_tables(monkeypatch):
    """Every registry table as a copy for the test: what the test registers is gone after it."""
    for module, name in _tables():
        table = getattr(module, name)
        monkeypatch.setattr(module, name, {key: (dict(value) if isinstance(value, dict) else
                                                 list(value) if isinstance(value, list) else value)
                                           for key, value in table.items()})


def _total() -> int:
    return sum(_size(getattr(module, name)) for module, name in _tables())


@pytest.mark.parametrize("kind", sorted(DECORATORS))
def test_second_registration_refused(fresh_tables, kind):
    register = DECORATORS[kind]
    register("TestOnlyOp", "TestOnlyOther")(lambda *args: None)
    with pytest.raises(ValueError, match="TestOnlyOp.* registered twice"):
        register("TestOnlyOp")(lambda *args: None)


@pytest.mark.parametrize("kind", sorted(DECORATORS))
def test_refused_registration_changes_nothing(fresh_tables, kind):
    before = _total()
    DECORATORS[kind]("TestOnlyOp")(lambda *args: "first")
    registered = _total()
    assert registered > before
    with pytest.raises(ValueError):
        DECORATORS[kind]("TestOnlyOp")(lambda *args: "second")
    assert _total() == registered


