import jax
import jax.numpy as jnp
import pytest

from bryo_mox.testing import MLP, ToyBackend


@pytest.fixture
def toy(bryo_plugin_manager):
    """The toy backend registered on a fresh plugin manager for one test."""
    bryo_plugin_manager.register(ToyBackend())
    return bryo_plugin_manager


@pytest.fixture
def mlp():
    return MLP((3, 4, 2), key=jax.random.key(0))


@pytest.fixture
def x():
    return jnp.linspace(-1.0, 1.0, 6).reshape(2, 3)
