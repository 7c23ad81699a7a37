import jax
import jax.numpy as jnp
import pytest

from bryo_mox import ModuleCall
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


@pytest.fixture
def mox_structure():
    """`structure(block)`: a MoX block as nested tuples, its variables numbered in order of
    appearance: equal for two blocks that are the same MoX."""
    return _structure


def _structure(block):
    """`block` as nested tuples, its variables numbered in order of appearance: equal
    for two conversions of one jaxpr that build the same MoX."""
    numbers: dict = {}

    def name(atom):
        if isinstance(atom, jax.extend.core.Literal):
            return repr(atom)
        return numbers.setdefault(atom, len(numbers))

    def node(n):
        ins, outs = tuple(map(name, n.invars)), tuple(map(name, n.outvars))
        if isinstance(n, ModuleCall):
            return ("call", n.info, n.n_state, n.n_state_out, ins, outs, walk(n.body))
        return ("eqn", n.primitive.name, ins, outs, tuple(walk(r.block) for r in n.regions))

    def walk(b):
        return (
            tuple(map(name, b.constvars)),
            tuple(map(name, b.invars)),
            tuple(map(node, b.nodes)),
            tuple(map(name, b.outvars)),
        )

    return walk(block)
