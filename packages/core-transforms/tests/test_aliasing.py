"""A Variable shared by several arguments of `vmap`/`scan` has one axis (of `jit`,
`shard_map`: one sharding): different ones are an error naming each place, in graph mode
with or without updates. Simple mode refuses to return the arguments' Variables."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bryo_graph import Object, Param
from bryo_transforms import StateAxes, jit, scan, shard_map, vmap


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


@pytest.mark.parametrize("modes", [{"graph": False}, {"graph_updates": False}])
def test_simple_mode_refuses_to_return_a_variable_of_the_arguments(modes):
    shared = Param(jnp.zeros((2, 3)))
    holder = Holder(shared)
    with pytest.raises(ValueError, match=r"Duplicate Param[\s\S]*args\[0\]\n  - out\n"):
        jit(lambda w: w, **modes)(shared)
    with pytest.raises(ValueError, match=r"args\[0\]\.w\n  - out\.w[\s\S]*`vmap` with"):
        vmap(lambda h: h, in_axes=0, out_axes=1, **modes)(holder)
    assert holder.w is shared and shared.value.shape == (2, 3)
    # a copy is fine, and graph mode with updates returns the caller's own objects
    assert jit(lambda w: w.copy(), **modes)(shared) is not shared
    assert jit(lambda w: w)(shared) is shared


@pytest.mark.parametrize("updates", [True, False])
def test_one_variable_gets_one_sharding(updates):
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("x",))
    shared = Param(jnp.ones(2))
    whole, split = NamedSharding(mesh, P()), NamedSharding(mesh, P("x"))
    add = jit(lambda a, b: a.value + b.value, in_shardings=(whole, split), graph_updates=updates)
    with pytest.raises(ValueError, match=r"Inconsistent aliasing[\s\S]*`in_shardings`"):
        add(shared, shared)
    same = jit(lambda a, b: a.value + b.value, in_shardings=(whole, whole), graph_updates=updates)
    np.testing.assert_array_equal(same(shared, shared), [2.0, 2.0])
    mapped = shard_map(
        lambda a, b: a.value + b.value,
        mesh=mesh,
        in_specs=(P(), P("x")),
        out_specs=P(),
        graph_updates=updates,
    )
    with pytest.raises(
        ValueError,
        match=r"Inconsistent aliasing[\s\S]*`in_specs`[\s\S]*P(artitionSpec)?\(\)[\s\S]*"
        r"P(artitionSpec)?\('x',?\)",
    ):
        mapped(shared, shared)


def test_vmap_refuses_returning_an_input_variable_on_another_axis():
    class Holder(Object):
        def __init__(self):
            self.a = Param(jnp.zeros((2, 3)))

    model = Holder()
    with pytest.raises(ValueError, match=r"Inconsistent aliasing detected: the Param at a "):
        vmap(lambda m: m, in_axes=0, out_axes=1)(model)
    assert model.a.shape == (2, 3)  # left as it was
    assert vmap(lambda m: m, in_axes=0, out_axes=0)(model) is model  # the same axis: fine
