"""The backend is an ordinary plugin: found through its entry points, lazily, removable."""

import equinox as eqx
import jax
import pytest

from bryo_graph import GraphError, split


def test_loaded_through_its_entry_point_when_an_equinox_class_shows_up(bryo_plugin_manager):
    assert bryo_plugin_manager.get_plugin("backend-equinox") is None  # not needed yet
    assert split(eqx.nn.Linear(2, 2, key=jax.random.key(0)))[1].flat_state()
    plugin = bryo_plugin_manager.get_plugin("backend-equinox")
    assert plugin is not None and plugin.__name__ == "bryo_equinox._plugin"
    assert bryo_plugin_manager.sources["backend-equinox"].distribution == "bryo-backend-equinox"


def test_without_it_equinox_modules_are_not_graphs(bryo_plugin_manager, monkeypatch):
    bryo_plugin_manager.load_all()
    bryo_plugin_manager.unregister(name="backend-equinox")
    with pytest.raises(GraphError, match="must be a graph node"):
        split(eqx.nn.Linear(2, 2, key=jax.random.key(0)))
