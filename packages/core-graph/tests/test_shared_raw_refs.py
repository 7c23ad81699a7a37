"""A raw `jax.Ref` (`jax.new_ref`) held at two places of a model is one State leaf: its
second place is a reference to the first in the GraphDef, and `merge` shares it again
(as Flax NNX 0.12 does for mutable arrays)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from bryo_graph import (
    Object,
    RefEntry,
    data,
    flatten,
    merge,
    merge_context,
    split,
    split_context,
    state,
    unflatten,
    update_context,
)

pytestmark = pytest.mark.skipif(
    not hasattr(jax, "new_ref"), reason="jax.new_ref (mutable arrays) needs JAX >= 0.7.2"
)


class _Tied(Object):
    def __init__(self) -> None:
        shared = jax.new_ref(jnp.arange(3.0))
        self.first = data(shared)
        self.second = data(shared)
        self.own = data(jax.new_ref(jnp.zeros(2)))


def test_split_keeps_one_leaf_and_refers_to_it() -> None:
    model = _Tied()
    graphdef, params = split(model)
    assert set(params) == {"first", "own"}
    assert params["first"] is model.first
    assert isinstance(graphdef.root.child("second"), RefEntry)


def test_merge_restores_the_sharing() -> None:
    graphdef, params = split(_Tied())
    for _ in range(20):  # built, then compiled once hot: both share
        rebuilt = merge(graphdef, params)
        assert rebuilt.first is rebuilt.second
        assert rebuilt.own is not rebuilt.first
    rebuilt.first[...] = jnp.ones(3)
    assert jnp.array_equal(rebuilt.second[...], jnp.ones(3))


def test_state_and_flatten_see_the_ref_once() -> None:
    model = _Tied()
    assert set(state(model)) == {"first", "own"}
    graphdef, leaves = flatten(model, with_paths=False)
    assert len(leaves) == 2
    rebuilt = unflatten(graphdef, leaves)
    assert rebuilt.first is rebuilt.second


def test_plain_arrays_held_twice_stay_two_leaves() -> None:
    class Twice(Object):
        def __init__(self) -> None:
            array = jnp.ones(2)
            self.a = array
            self.b = array

    assert set(state(Twice())) == {"a", "b"}  # arrays are values: never deduplicated


def test_an_update_context_split_refers_to_the_ref_once() -> None:
    model = _Tied()
    with update_context("tied"):
        with split_context("tied") as context:
            graphdef, params = context.split(model)
        assert set(params) == {"first", "own"}
        with merge_context("tied", True) as context:
            rebuilt = context.merge(graphdef, params)
        assert rebuilt.first is rebuilt.second
