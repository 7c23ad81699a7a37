"""Equinox predicates as bryo filters, and bryo filters as Equinox filter specs."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_equinox import ValuePredicate, filter_spec, partition
from bryo_filters import Not, PathContains, to_predicate
from bryo_graph import BatchStat, Param, VariableState, clone, split, state


class Mixed(eqx.Module):
    weight: jax.Array
    steps: jax.Array
    table: np.ndarray
    activation: object
    unset: object = None  # never set on the instance: read from the class, as in Equinox

    def __init__(self):
        self.activation = jax.nn.relu
        self.weight = jnp.ones((2, 2))
        self.steps = jnp.zeros((), jnp.int32)
        self.table = np.arange(3)


MODEL = Mixed()


def test_equinox_predicates_become_value_predicates():
    predicate = to_predicate(eqx.is_inexact_array)
    assert predicate == ValuePredicate(eqx.is_inexact_array)
    assert predicate(("weight",), VariableState(Param, jnp.ones(2)))
    assert not predicate(("steps",), VariableState(Param, jnp.zeros((), jnp.int32)))


def test_one_argument_callables_are_value_predicates_two_arguments_are_not():
    assert isinstance(to_predicate(lambda x: x.ndim == 2), ValuePredicate)
    two = lambda path, value: True
    assert to_predicate(two) is two


def test_split_with_equinox_predicates():
    _, floats, rest = split(MODEL, eqx.is_inexact_array, ...)
    assert list(floats.flat_state()) == [("weight",)]
    assert set(rest.flat_state()) == {("steps",), ("table",)}
    _, ints = split(MODEL, Not(eqx.is_inexact_array), eqx.is_inexact_array)[:2]
    assert set(ints.flat_state()) == {("steps",), ("table",)}
    assert set(state(MODEL, lambda v: v.ndim == 0).flat_state()) == {("steps",)}


def test_filter_spec_feeds_equinox_partition():
    spec = filter_spec(MODEL, Param)
    assert jax.tree_util.tree_structure(spec) == jax.tree_util.tree_structure(MODEL)
    ours = eqx.partition(MODEL, spec)
    theirs = eqx.partition(MODEL, eqx.is_array)
    assert jax.tree_util.tree_structure(ours) == jax.tree_util.tree_structure(theirs)
    assert spec.activation is False  # a function is not part of the State
    assert "unset" not in spec.__dict__ and "unset" not in clone(MODEL).__dict__


def test_filter_spec_by_path_and_tag_mix():
    mlp = eqx.nn.MLP(2, 2, 3, 1, key=jax.random.key(0))
    biases, rest = partition(mlp, PathContains("bias"))
    assert biases.layers[0].weight is None and rest.layers[0].bias is None
    np.testing.assert_array_equal(eqx.combine(biases, rest)(jnp.ones(2)), mlp(jnp.ones(2)))
    spec = filter_spec(mlp, PathContains("bias"), eqx.is_inexact_array)
    assert all(layer.weight and layer.bias for layer in spec.layers)


def test_filter_spec_drives_filter_grad():
    mlp = eqx.nn.MLP(2, 1, 3, 1, key=jax.random.key(1))
    spec = filter_spec(mlp, PathContains("weight"))
    diff, static = eqx.partition(mlp, spec)
    grads = jax.grad(lambda d: jnp.sum(eqx.combine(d, static)(jnp.ones(2))))(diff)
    assert grads.layers[0].bias is None and grads.layers[0].weight.shape == (3, 2)


def test_filter_spec_needs_a_filter_and_rejects_bad_literals():
    with pytest.raises(TypeError, match="at least one filter"):
        filter_spec(MODEL)
    with pytest.raises(TypeError, match="`filter` must be"):
        filter_spec(MODEL, 3.5)


def test_filter_spec_of_batch_stats():
    bn = eqx.nn.BatchNorm(3, axis_name="b", mode="batch")
    spec = filter_spec(bn, BatchStat)
    assert spec.weight is False and spec.bias is False
