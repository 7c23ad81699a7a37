"""A transformed function may not return a Variable it reached through its closure."""

import jax.numpy as jnp
import pytest

from bryo_graph import Object, Param, Variable, clone
from bryo_transforms import jit, vmap


class Holder(Object):
    def __init__(self) -> None:
        self.a = Variable(jnp.arange(4))


@pytest.mark.parametrize(
    ("graph_updates", "message"),
    [
        (False, r"Cannot return captured Variable: the Variable at out\.a was made outside `vmap`"),
        (
            True,
            r"Cannot extract graph node from different trace level: "
            r".*Variable \(output graph 0, at a\)",
        ),
    ],
)
def test_returning_a_captured_module_from_vmap_is_refused(graph_updates, message):
    held = Holder()

    @vmap(in_axes=0, out_axes=0, graph=True, graph_updates=graph_updates)
    def f(x):
        return held

    with pytest.raises(ValueError, match=message):
        f(jnp.zeros((4,)))
    assert held.a[...].tolist() == [0, 1, 2, 3]  # the captured module is left as it was


@pytest.mark.parametrize("graph", [True, False])
def test_a_captured_variable_in_a_returned_tree_names_its_path(graph):
    w = Param(jnp.ones(2))

    @jit(graph=graph, graph_updates=False)
    def f(x):
        return {"out": x, "weights": [w]}

    with pytest.raises(ValueError, match=r"at out\['weights'\]\[0\] was made outside `jit`"):
        f(jnp.ones(2))


def test_copies_and_modules_made_inside_may_be_returned():
    held = Holder()

    @jit(graph=True, graph_updates=True)
    def copied(x):
        return clone(held), Holder()

    a, b = copied(jnp.ones(2))
    assert a is not held and a.a[...].tolist() == [0, 1, 2, 3]
    assert b.a[...].tolist() == [0, 1, 2, 3]

    @jit(graph=True, graph_updates=False)
    def made_inside(x):
        return Holder()

    assert made_inside(jnp.ones(2)).a[...].tolist() == [0, 1, 2, 3]


def test_an_argument_module_may_be_returned_with_graph_updates():
    held = Holder()

    @jit
    def same(m):
        return m

    assert same(held) is held
