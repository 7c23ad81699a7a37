"""The backend is an ordinary plugin: found through its entry points (lazily), removable."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest
from flax import nnx

yax = pytest.importorskip("bryo_mox")


def trace_dense():
    model = nn.Dense(3)
    x = jnp.ones((1, 2))
    return yax.make_mox(model.apply)(model.init(jax.random.key(0), x), x)


def test_loaded_through_its_entry_point_when_make_mox_traces(bryo_plugin_manager):
    assert [node.name for node in yax.query("//module_call", trace_dense())] == [""]
    plugin = bryo_plugin_manager.get_plugin("backend-flax")
    assert plugin is not None and plugin.__name__ == "bryo_flax._plugin"


def test_without_it_flax_calls_are_plain_equations(bryo_plugin_manager):
    bryo_plugin_manager.load_all()
    bryo_plugin_manager.unregister(name="backend-flax")
    assert yax.query("//module_call", trace_dense()) == []
    linear = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    assert yax.query("//module_call", yax.make_mox(lambda x: linear(x))(jnp.ones(2))) == []
