"""A Variable shared by several arguments of `vmap`/`scan` has one axis: different axes
for it are an error naming each place, in graph mode with or without updates."""

import jax.numpy as jnp
import pytest

from bryo_graph import Object, Param
from bryo_transforms import StateAxes, scan, vmap


class Holder(Object):
    def __init__(self, shared: Param) -> None:
        self.w = shared


@pytest.mark.parametrize("updates", [True, False])
def test_vmap_refuses_two_axes_for_one_variable(updates):
    shared = Param(jnp.zeros((3, 3)))
    first, second = Holder(shared), Holder(shared)
    f = vmap(lambda a, b: None, in_axes=(0, 1), graph_updates=updates)
    with pytest.raises(ValueError, match=r"Inconsistent aliasing detected[\s\S]*Param[\s\S]*0"):
        f(first, second)
    assert vmap(lambda a, b: a.w.value + b.w.value, graph_updates=updates)(first, second).shape == (
        3,
        3,
    )
    assert shared.value.shape == (3, 3)


def test_state_axes_are_resolved_before_comparing():
    shared = Param(jnp.arange(3.0))
    first, second = Holder(shared), Holder(shared)
    f = vmap(lambda a, b: a.w.value * b.w.value, in_axes=(StateAxes({...: 0}), 0))
    assert f(first, second).tolist() == [0.0, 1.0, 4.0]
    g = vmap(lambda a, b: None, in_axes=(StateAxes({...: None}), 0))
    with pytest.raises(ValueError, match=r"  0/w: None\n  1/w: 0"):
        g(first, second)


def test_scan_refuses_a_variable_both_scanned_and_broadcast():
    v = Param(jnp.arange(3.0))
    f = scan(lambda c, a, b: (c, a.value), in_axes=(0, 0, None), out_axes=(0, 0), length=3)
    with pytest.raises(ValueError, match="Inconsistent aliasing detected"):
        f(jnp.zeros(3), v, v)
