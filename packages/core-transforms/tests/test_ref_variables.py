"""Array-ref backed Variables (`ref=True`) through the lifted transforms: a write into an
input's ref is seen outside in every mode, and refs made inside a graph-mode transform
leave it as new refs (JAX cannot return a ref: their values leave, as in Flax 0.12)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_graph import BatchStat, Object, Param, data, with_vars
from bryo_transforms import jit, vmap


class Counter(Object):
    def __init__(self) -> None:
        self.w = Param(jnp.ones(2))
        self.count = BatchStat(jnp.zeros(()))

    def __call__(self, x: jax.Array) -> jax.Array:
        self.count[...] += 1
        return x * self.w[...]


@pytest.mark.parametrize("keywords", [{}, {"graph_updates": False}, {"graph": False}])
def test_jit_writes_into_input_refs_in_every_mode(keywords):
    model = with_vars(Counter(), ref=True)
    ref = model.count.get_raw_value()
    step = jit(lambda m, x: m(x), **keywords)
    step(model, jnp.ones(2))
    np.testing.assert_array_equal(step(model, jnp.ones(2)), [1.0, 1.0])
    assert model.count.get_raw_value() is ref and float(ref[...]) == 2.0


def test_graph_jit_returns_refs_made_inside_as_new_refs():
    model = with_vars(Counter(), ref=True)

    @jit
    def grow(m):
        m.extra = BatchStat(jnp.full(2, 3.0), ref=True)
        m.raw = jax.new_ref(jnp.ones(3))
        return with_vars(Counter(), ref=True)

    made = grow(model)
    assert made.w.ref and type(made.w.get_raw_value()) is jax.Ref
    assert model.extra.ref and type(model.extra.get_raw_value()) is jax.Ref
    assert type(model.raw) is jax.Ref
    np.testing.assert_array_equal(model.extra[...], [3.0, 3.0])
    model.extra[...] = jnp.zeros(2)  # a usable ref outside, not a leaked tracer
    np.testing.assert_array_equal(model.extra.get_raw_value()[...], [0.0, 0.0])


def test_vmap_returns_a_batched_new_ref():
    made = vmap(lambda x: Param(x * 2, ref=True))(jnp.ones((3, 2)))
    assert made.ref and type(made.get_raw_value()) is jax.Ref
    np.testing.assert_array_equal(made[...], np.full((3, 2), 2.0))


class _TiedRefs(Object):
    """A raw `jax.new_ref` held under two attributes (one State leaf, shared by merge)."""

    def __init__(self) -> None:
        shared = jax.new_ref(jnp.ones(3))
        self.first = data(shared)
        self.second = data(shared)


def test_a_raw_ref_held_twice_stays_shared_through_jit() -> None:
    model = _TiedRefs()
    ref = model.first

    @jit
    def step(model: _TiedRefs) -> bool:
        model.first[...] = model.second[...] + 1  # one array: both names see the write
        return model.first is model.second

    assert bool(step(model))
    assert model.first is ref and model.second is ref
    assert jnp.array_equal(model.second[...], jnp.full(3, 2.0))
