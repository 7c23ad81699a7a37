"""`prefix`: a leaf no filter of a mapping matches is an error naming it; with
`graph=True` it returns one `TreeState` per graph node, the nodes taken jointly, which
the transforms take in graph simple mode (`graph=True, graph_updates=False`)."""

import jax.numpy as jnp
import numpy as np
import pytest

from bryo_graph import BatchStat, Object, Param, State
from bryo_graph.extract import TreeState
from bryo_transforms import jit, prefix, vmap

SIMPLE = {"graph": True, "graph_updates": False}


class Stack(Object):
    def __init__(self) -> None:
        self.w = Param(jnp.ones((4, 2)))
        self.count = BatchStat(jnp.zeros(()))


def test_a_leaf_no_filter_matches_is_an_error_naming_it():
    with pytest.raises(
        ValueError,
        match=r"No filter matched leaf at path \('count',\)[\s\S]*Filters: \[<class "
        r"'.*Param'>\][\s\S]*\.\.\.: None",
    ):
        prefix(Stack(), {Param: 0}, graph=False)
    axes = prefix(Stack(), {Param: 0, ...: None}, graph=False)
    assert axes.w == 0 and axes.count is None


def test_graph_true_gives_a_tree_state_per_node_jointly():
    model = Stack()
    first, second = prefix((model, model), {Param: 0, ...: None}, graph=True)
    assert isinstance(first, TreeState) and isinstance(first.state, State)
    assert first.state["w"] == 0 and first.state["count"] is None
    assert len(second.state.flat_state()) == 0  # the model's second place: the first's
    assert first.replace(state=State({})).graphdef == first.graphdef


def test_tree_state_prefixes_map_a_model_passed_twice():
    model = Stack()
    ax1, ax2 = prefix((model, model), {Param: 0, ...: None}, graph=True)

    def f(a, b, x):
        assert a is b
        return x @ a.w[...] + x @ b.w[...]

    out = vmap(f, in_axes=(ax1, ax2, None), **SIMPLE)(model, model, jnp.ones(2))
    np.testing.assert_array_equal(out, jnp.full((4,), 4.0))


def test_tree_state_prefixes_check_each_place_of_a_shared_variable():
    shared = Param(jnp.ones((3, 3)))
    left, right = Object(), Object()
    left.a, right.b = shared, shared
    ax1, ax2 = prefix(
        (left, right), {lambda p, x: p[-1] == "a": 0, lambda p, x: p[-1] == "b": 1}, graph=True
    )
    with pytest.raises(ValueError, match=r"Inconsistent aliasing[\s\S]*0\.a: 0\n  1\.b: 1"):
        vmap(lambda a, b: a.a[...], in_axes=(ax1, ax2), **SIMPLE)(left, right)


def test_tree_state_out_axes_for_returned_modules():
    model = Stack()
    out1, out2 = prefix((model, model), {Param: 1, ...: None}, graph=True)

    def make(x):
        made = Stack()
        made.w.value = made.w.value * x
        return made, made

    a, b = vmap(make, out_axes=(out1, out2), **SIMPLE)(jnp.arange(3.0))
    assert a is b and a.w.shape == (4, 3, 2) and a.count.shape == ()


def test_tree_states_are_refused_with_graph_updates():
    model = Stack()
    axes = prefix(model, {...: 0}, graph=True)
    with pytest.raises(
        ValueError, match=r"`TreeState` at `in_axes`\[0\] of `vmap`[\s\S]*graph_updates=False"
    ):
        vmap(lambda m: m.w[...], in_axes=(axes,))(model)
    assert jit(lambda m: m.w[...].sum(), in_shardings=None, **SIMPLE)(model) == 8.0


def test_scan_takes_a_tree_state_prefix():
    from bryo_transforms import scan

    model = Stack()
    axes = prefix(model, {Param: 0, ...: None}, graph=True)
    run = scan(
        lambda m, c: (c + m.w[...].sum(), None), in_axes=(axes, 0), out_axes=(0, 0), **SIMPLE
    )
    total, _ = run(model, jnp.zeros(4))
    np.testing.assert_array_equal(total, jnp.full((4,), 2.0))
