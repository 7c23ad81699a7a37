"""A State flattens in sorted path order, whatever order its paths were inserted in."""

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bryo_graph import State

_KEYS = st.one_of(st.integers(0, 5), st.sampled_from(["a", "b", "kernel", "bias", "z"]))
_PATHS = st.lists(st.tuples(_KEYS, _KEYS), min_size=1, max_size=8, unique=True)


@given(paths=_PATHS, data=st.data())
def test_insertion_order_does_not_change_the_treedef(paths, data):
    shuffled = data.draw(st.permutations(paths))
    first = State.from_flat_path({path: float(i) for i, path in enumerate(paths)})
    index = {path: float(i) for i, path in enumerate(paths)}
    second = State.from_flat_path({path: index[path] for path in shuffled})
    assert jax.tree.structure(first) == jax.tree.structure(second)
    assert jax.tree.leaves(first) == jax.tree.leaves(second)
    summed = jax.tree.map(lambda x, y: x + y, first, second)
    assert summed.flat_state() == {path: 2 * index[path] for path in paths}


def test_leaves_come_in_sorted_path_order_ints_before_strings():
    state = State.from_flat_path(
        {("b",): 1, ("a", "y"): 2, ("a", "x"): 3, ("layers", 10): 4, ("layers", 2): 5}
    )
    assert jax.tree.leaves(state) == [3, 2, 1, 5, 4]
    keyed = jax.tree_util.tree_flatten_with_path(state)[0]
    assert [tuple(key.key for key in path) for path, _ in keyed] == [
        ("a", "x"),
        ("a", "y"),
        ("b",),
        ("layers", 2),
        ("layers", 10),
    ]


def test_key_paths_name_one_key_per_level_as_flax_does():
    state = State({"linear": {"kernel": 1.0, "bias": 2.0}, "scale": 3.0})
    keyed = jax.tree_util.tree_flatten_with_path(state)[0]
    assert [jax.tree_util.keystr(path) for path, _ in keyed] == [
        "['linear']['bias']",
        "['linear']['kernel']",
        "['scale']",
    ]
    # a mask by the last key, as optax users write it
    mask = jax.tree_util.tree_map_with_path(lambda path, _: path[-1].key != "bias", state)
    assert mask.flat_state() == {
        ("linear", "bias"): False,
        ("linear", "kernel"): True,
        ("scale",): True,
    }


def test_a_level_mixing_int_and_str_keys_still_flattens_by_whole_paths():
    state = State.from_flat_path({("a", 0): 1.0, ("a", "x"): 2.0, ("b",): 3.0})
    keyed = jax.tree_util.tree_flatten_with_path(state)[0]
    assert [path[0].key for path, _ in keyed] == [("a", 0), ("a", "x"), ("b",)]
    doubled = jax.tree.map(lambda x: 2 * x, state)
    assert doubled.flat_state() == {("a", 0): 2.0, ("a", "x"): 4.0, ("b",): 6.0}


def test_unflatten_keeps_the_values_on_their_paths_and_the_input_untouched():
    state = State.from_flat_path({("w",): jnp.ones(2), ("b",): jnp.zeros(3)})
    doubled = jax.tree.map(lambda x: x * 2, state)
    assert doubled["w"].shape == (2,) and doubled["b"].shape == (3,)
    assert list(state.flat_state()) == [("w",), ("b",)]
    assert float(state["w"][0]) == 1.0


def test_params_and_grads_line_up_under_jit_whatever_their_order():
    params = State.from_flat_path({("w",): jnp.ones(2), ("b",): jnp.zeros(3)})
    grads = State.from_flat_path({("b",): jnp.ones(3), ("w",): jnp.full(2, 2.0)})
    step = jax.jit(lambda p, g: jax.tree.map(lambda x, y: x - 0.5 * y, p, g))
    new = step(params, grads)
    assert new["w"].tolist() == [0.0, 0.0]
    assert new["b"].tolist() == [-0.5, -0.5, -0.5]


def test_mismatched_paths_still_fail_naming_the_paths():
    first = State.from_flat_path({("w",): 1.0})
    second = State.from_flat_path({("v",): 1.0})
    with pytest.raises(ValueError, match=r"\('w',\)|\('v',\)"):
        jax.tree.map(lambda x, y: x + y, first, second)


def test_a_flat_state_is_a_pytree_over_its_leaves():
    from bryo_graph import FlatState

    flat = FlatState([(("w",), jnp.ones(2)), (("b",), jnp.zeros(3))])
    assert [leaf.shape for leaf in jax.tree.leaves(flat)] == [(2,), (3,)]
    doubled = jax.jit(lambda f: jax.tree.map(lambda x: x * 2 + 1, f))(flat)
    assert isinstance(doubled, FlatState)
    assert doubled.paths == (("w",), ("b",))
    assert doubled.leaves[0].tolist() == [3.0, 3.0]
    keyed = jax.tree_util.tree_flatten_with_path(flat)[0]
    assert [path[0].key for path, _ in keyed] == [("w",), ("b",)]
    assert flat.leaves[0].tolist() == [1.0, 1.0]


def test_tree_mode_flatten_lists_leaves_in_sorted_path_order_and_unflattens_them():
    import collections

    from bryo_graph import Param, flatten, unflatten

    Point = collections.namedtuple("Point", ["y", "x"])
    point = Point(y=Param(jnp.array(1.0)), x=Param(jnp.array(2.0)))
    treedef, flat = flatten(point, graph=False)
    assert [path for path, _ in flat] == [("x",), ("y",)]
    rebuilt = unflatten(treedef, flat)
    assert isinstance(rebuilt, Point) and float(rebuilt.y[...]) == 1.0
    treedef, leaves = flatten(point, graph=False, with_paths=False)
    assert [float(leaf[...]) for leaf in leaves] == [2.0, 1.0]
    again = unflatten(treedef, leaves)
    assert float(again.x[...]) == 2.0 and float(again.y[...]) == 1.0
