"""Explicit `data`/`static` statuses survive the copies the graph functions make.

A tuple of Variables is static by itself (as in Flax NNX 0.12); `data((variable,))` makes
it data. The status is kept in the GraphDef (the aux of the node), so `merge` and the
in-place updates of `update_context` rebuild it: on a copy without it, the tuple would be
a static value holding the copy's Variables.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_graph import (
    Dict,
    List,
    Object,
    Param,
    Variable,
    data,
    graphdef,
    merge,
    merge_context,
    split,
    split_context,
    static,
    update,
    update_context,
)


class Cache(Variable):
    pass


class Sub(Object):
    def __init__(self):
        self.v = Param(jnp.zeros(2))


class Model(Object):
    def __init__(self, kind="tuple"):
        self.w = Param(jnp.ones(2))
        self.c = data(_holders[kind]())
        self.n = data(3)
        self.names = static(("a", "b"))


_holders = {
    "tuple": lambda: (Cache(jnp.zeros(2)),),
    "nested": lambda: ((Cache(jnp.zeros(2)),), Cache(jnp.zeros(2))),
    "list": lambda: [Cache(jnp.zeros(2))],
    "dict": lambda: {"a": Cache(jnp.zeros(2))},
    "modules": lambda: (Sub(),),
}
KINDS = list(_holders)


def _first_variable(value):
    while not isinstance(value, Variable):
        value = (
            value.v if isinstance(value, Object) else value["a" if isinstance(value, dict) else 0]
        )
    return value


@pytest.mark.parametrize("kind", KINDS)
def test_merge_keeps_data_attributes_data(kind):
    model = Model(kind)
    graphdef_, state_ = split(model)
    for _ in range(20):  # walked first, then compiled once hot: both keep the statuses
        copy = merge(graphdef_, state_)
        assert graphdef(copy) == graphdef_
        assert jax.tree.structure(copy) == jax.tree.structure(model)
        assert _first_variable(copy.c) is _first_variable(model.c)  # a State leaf, not static
    assert ("n",) in dict(state_.flat_state())


@pytest.mark.parametrize("kind", KINDS)
def test_update_writes_into_the_variables_of_data_attributes(kind):
    model = Model(kind)
    variable = _first_variable(model.c)
    _, state_ = split(model)
    update(model, jax.tree.map(lambda x: x + 5, state_))
    assert _first_variable(model.c) is variable
    np.testing.assert_array_equal(variable[...], np.full(2, 5.0))
    assert model.n == 8


@pytest.mark.parametrize("container", [List, Dict])
def test_item_statuses_of_lists_and_dicts_survive_merge(container):
    items = container(
        [data((Cache(jnp.zeros(2)),))] if container is List else {"t": data((Cache(jnp.zeros(2)),))}
    )
    key = 0 if container is List else "t"
    graphdef_, state_ = split(items)
    copy = merge(graphdef_, state_)
    assert graphdef(copy) == graphdef_
    assert copy[key][0] is items[key][0]
    assert jax.tree.structure(copy) == jax.tree.structure(items)


def test_the_graphdef_tells_modules_with_and_without_data_marks_apart():
    marked, plain = Model(), Model()
    plain.c = static(())
    assert graphdef(marked) != graphdef(plain)


def _round_trip(model, inner_fn):
    """Split outside, merge/edit/split inside a `jax.jit`, merge outside (reusing the
    outer objects)."""
    with update_context("t"):
        with split_context("t") as ctx:
            graphdef_, state_ = ctx.split(model)

        def inside(graphdef_, state_):
            with merge_context("t", inner=True) as ctx:
                inner = ctx.merge(graphdef_, state_)
            inner_fn(inner)
            with split_context("t") as ctx:
                return ctx.split(inner)

        graphdef_, state_ = jax.jit(inside)(graphdef_, state_)
        with merge_context("t", inner=False) as ctx:
            return ctx.merge(graphdef_, state_)


def test_outer_merge_keeps_the_callers_variables_in_data_attributes():
    model = Model()
    variable = _first_variable(model.c)

    def set_cache(inner):
        inner.c[0][...] = inner.w[...] + 1

    assert _round_trip(model, set_cache) is model
    assert model.c[0] is variable
    np.testing.assert_array_equal(variable[...], np.full(2, 2.0))


def test_outer_merge_takes_data_marks_made_inside():
    model = Model()

    def mark(inner):
        inner.d = data((Cache(inner.w[...] * 3),))  # a static attribute without the mark
        inner.names = data([Cache(jnp.ones(2))])  # a static attribute made data

    _round_trip(model, mark)
    np.testing.assert_array_equal(model.d[0][...], np.full(2, 3.0))
    assert isinstance(model.names[0], Cache)
    assert graphdef(model) == graphdef(merge(*split(model)))
    variables = jax.tree.leaves(model, is_leaf=lambda x: isinstance(x, Variable))
    # pytree children, by name: c, d, n, names, w
    assert variables[1] is model.d[0] and variables[3] is model.names[0]
