"""The kernel registries (exporters/glow/kernels/registry.py) refuse a second registration for the same key: a
second ``@workspace("QConv")`` would otherwise silently replace the first and change which bytes a layer gets."""

import pytest

from pegasus.exporters.glow.kernels import registry

TABLES = ("_EMITTERS", "_CHANNELS_LAST", "_PACKERS", "_FIRST_PACKERS", "_WORKSPACES", "_STREAMS", "_RUNTIME_DIMS",
          "_GROUPS")
DECORATORS = {
    "emitter": registry.emitter,
    "packer": registry.packer,
    "workspace": registry.workspace,
    "streams": registry.streams,
    "runtime_dims": registry.runtime_dims,
    "group_emitter": registry.group_emitter,
}


@pytest.fixture
def fresh_tables(monkeypatch):
    """Every registry table as an empty copy for the test (the real registrations stay as they were)."""
    for name in TABLES:
        monkeypatch.setattr(registry, name, {})


@pytest.mark.parametrize("kind", sorted(DECORATORS))
def test_second_registration_refused(fresh_tables, kind):
    register = DECORATORS[kind]
    register("Op", "Other")(lambda *args: None)
    with pytest.raises(ValueError, match="for Op registered twice"):
        register("Op")(lambda *args: None)


@pytest.mark.parametrize("kind", sorted(DECORATORS))
def test_first_registration_kept(fresh_tables, kind):
    first = DECORATORS[kind]("Op")(lambda *args: "first")
    with pytest.raises(ValueError):
        DECORATORS[kind]("Op")(lambda *args: "second")
    tables = [getattr(registry, name) for name in TABLES]
    assert [table["Op"] for table in tables if "Op" in table] == [first]


def test_packer_layouts_keyed_apart(fresh_tables):
    """One op may have a channels-last and a channels-first packer, but not two of either."""
    last = registry.packer("Op")(lambda *args: "last")
    first = registry.packer("Op", channels_first=True)(lambda *args: "first")
    assert (registry._PACKERS["Op"], registry._FIRST_PACKERS["Op"]) == (last, first)
    with pytest.raises(ValueError, match="channels-first packer for Op registered twice"):
        registry.packer("Op", channels_first=True)(lambda *args: None)
    with pytest.raises(ValueError, match="channels-last packer for Op registered twice"):
        registry.packer("Op")(lambda *args: None)


def test_real_registrations_load():
    """Every kernel family registers without a clash (importing them all raises none)."""
    assert "QConv" in registry.emitted_ops()
    assert registry.get_group_emitter("QConv") is not None and registry.get_group_emitter("Conv") is not None
