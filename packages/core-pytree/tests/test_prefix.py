"""Prefix broadcasting as `vmap`'s `in_axes` does it (seed 004), and its errors."""

from __future__ import annotations

import copy
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.tree_util import tree_structure

from bryo_pytree import (
    PrefixError,
    broadcast_prefix,
    flatten_to_paths,
    path_str,
    pytree_dataclass,
    tree_map_with_prefix,
)
from bryo_pytree._paths import node_children

# Seed 004: "if we pass the following input to vmap ... (a1, {"k1": a2, "k2": a3})".
A1, A2, A3 = "a1", "a2", "a3"
VALUE = (A1, {"k1": A2, "k2": A3})


def test_seed_in_axes_full_spec_is_its_own_broadcast():
    in_axes = (None, {"k1": None, "k2": 0})
    assert broadcast_prefix(in_axes, VALUE) == in_axes


def test_seed_in_axes_prefix_maps_the_whole_dict():
    # "(None, 0)  # equivalent to (None, {"k1": 0, "k2": 0})"
    assert broadcast_prefix((None, 0), VALUE) == (None, {"k1": 0, "k2": 0})


def test_seed_in_axes_single_leaf_maps_everything():
    # "we can simply write a single leaf value that is applied over the entire argument tuple"
    assert broadcast_prefix(0, VALUE) == (0, {"k1": 0, "k2": 0})
    assert broadcast_prefix(None, VALUE) == (None, {"k1": None, "k2": None})


@pytest.mark.parametrize("in_axes", [(None, 0), (None, {"k1": None, "k2": 0}), 0])
def test_broadcast_agrees_with_vmap(in_axes):
    value = (jnp.ones((4, 3)), {"k1": jnp.arange(4.0), "k2": jnp.arange(8.0).reshape(4, 2)})
    full = broadcast_prefix(in_axes, value, name="in_axes")
    pair = lambda a, d: (a, d)
    expected = jax.vmap(pair, in_axes=in_axes)(*value)
    got = jax.vmap(pair, in_axes=full)(*value)
    jax.tree_util.tree_map(np.testing.assert_array_equal, got, expected)


def test_prefix_leaf_over_an_empty_subtree():
    assert broadcast_prefix({"a": 1, "b": 2}, {"a": None, "b": [3, ()]}) == {
        "a": None,
        "b": [2, ()],
    }


def test_is_leaf_stops_the_value_tree():
    value = {"w": [1, 2], "b": [3]}
    full = broadcast_prefix({"w": 0, "b": 1}, value, is_leaf=lambda x: isinstance(x, list))
    assert full == {"w": 0, "b": 1}


def test_dataclass_nodes_broadcast_by_field():
    @pytree_dataclass
    class Pair:
        left: object
        right: object

    value = Pair(jnp.ones(2), {"x": jnp.ones(3), "y": jnp.ones(4)})
    full = broadcast_prefix(Pair(None, 0), value)
    assert isinstance(full, Pair)
    assert full.left is None and full.right == {"x": 0, "y": 0}


def test_tree_map_with_prefix():
    value = (jnp.ones(2), {"k1": jnp.ones(2), "k2": jnp.ones(2)})
    scaled = tree_map_with_prefix(lambda s, x: s * x, (1.0, 3.0), value)
    np.testing.assert_array_equal(scaled[1]["k2"], [3.0, 3.0])
    np.testing.assert_array_equal(scaled[0], [1.0, 1.0])


# --- errors ----------------------------------------------------------------------------


def test_error_names_the_path_and_both_sides():
    with pytest.raises(PrefixError) as info:
        broadcast_prefix((None, {"k1": 0}), VALUE, name="in_axes")
    assert info.value.path == (1,)
    assert str(info.value) == (
        "`in_axes` does not fit the value at [1]: `in_axes` has a dict with keys ['k1'], "
        "the value has a dict with keys ['k1', 'k2']. Make `in_axes` a prefix of the value's "
        "structure (same containers and keys), or use one leaf for the whole subtree."
    )


def test_error_when_the_prefix_goes_deeper_than_the_value():
    with pytest.raises(PrefixError) as info:
        broadcast_prefix((0, {"k1": {"deep": 0}, "k2": 0}), VALUE, name="in_axes")
    assert info.value.path == (1, "k1")
    assert "at [1].k1: `in_axes` has a dict there, the value has the leaf 'a2'" in str(info.value)
    assert "A leaf of `in_axes` may stand for a whole subtree" in str(info.value)


def test_error_on_container_type_mismatch():
    with pytest.raises(
        PrefixError,
        match=r"at <root>: `prefix` has a list with keys \[0, 1\], "
        r"the value has a tuple with keys \[0, 1\]",
    ):
        broadcast_prefix([0, 0], (1, 2))


def test_error_on_length_mismatch():
    with pytest.raises(PrefixError, match=r"at <root>: `prefix` has a tuple with keys \[0\]"):
        broadcast_prefix((0,), (1, 2))


def test_error_shows_arrays_by_shape():
    with pytest.raises(PrefixError, match=r"the value has the leaf ArrayImpl\(2, 3\)"):
        broadcast_prefix({"w": [0]}, {"w": jnp.ones((2, 3))})


def test_prefix_error_is_a_value_error():
    assert issubclass(PrefixError, ValueError)


# --- hypothesis: random prefix cuts ----------------------------------------------------

properties = settings(max_examples=40, deadline=None)

AXES = st.one_of(st.none(), st.integers(min_value=0, max_value=3))


@st.composite
def prefix_cut(draw, tree):
    """A prefix of `tree`: each subtree kept as a node, or cut to one prefix leaf."""
    children = node_children(tree)
    if tree is None or not children or draw(st.booleans()):
        return draw(AXES)
    cut = {key: draw(prefix_cut(child)) for key, child in children}
    if isinstance(tree, dict):
        return cut
    return type(tree)(cut[i] for i in range(len(tree)))


def _expected_leaf(prefix_flat, path):
    """The prefix leaf that covers `path`: the one at its longest prefix."""
    for depth in range(len(path), -1, -1):
        if path[:depth] in prefix_flat:
            return prefix_flat[path[:depth]]
    raise AssertionError(f"no prefix leaf covers {path_str(path)}")


@properties
@given(data=st.data())
def test_broadcast_of_a_prefix_cut_has_the_trees_structure(strategies, data):
    tree = data.draw(strategies.trees())
    prefix = data.draw(prefix_cut(tree))
    tree_copy, prefix_copy = copy.deepcopy(tree), copy.deepcopy(prefix)

    full = broadcast_prefix(prefix, tree)

    tree_def = tree_structure(tree)
    full_leaves = tree_def.flatten_up_to(full)  # raises if `full` lacks tree's structure
    prefix_flat = flatten_to_paths(prefix, is_leaf=lambda x: x is None)
    for path, leaf in zip(flatten_to_paths(tree), full_leaves, strict=True):
        assert leaf == _expected_leaf(prefix_flat, path)
    assert tree == tree_copy and prefix == prefix_copy  # inputs unchanged
    assert broadcast_prefix(full, tree) == full  # a full spec is its own broadcast


@st.composite
def broken_prefix(draw, tree, path=()):
    """A prefix cut with exactly one node made to disagree; returns (prefix, bad path)."""
    children = node_children(tree)
    if tree is None or not children:
        # Replace a leaf (or empty node) by a container the value does not have there.
        return {"surplus": 0}, path
    if draw(st.booleans()):
        cut = {key: draw(prefix_cut(child)) for key, child in children}
        if isinstance(tree, dict):
            cut["surplus"] = 0
            return cut, path
        return type(tree)([*(cut[i] for i in range(len(tree))), 0]), path
    broken_key = draw(st.sampled_from([key for key, _ in children]))
    cut = {}
    bad_path = None
    for key, child in children:
        if key == broken_key:
            cut[key], bad_path = draw(broken_prefix(child, (*path, key)))
        else:
            cut[key] = draw(prefix_cut(child))
    if isinstance(tree, dict):
        return cut, bad_path
    return type(tree)(cut[i] for i in range(len(tree))), bad_path


@properties
@given(data=st.data())
def test_mismatch_names_the_first_disagreeing_path(strategies, data):
    tree = data.draw(strategies.trees())
    prefix, bad_path = data.draw(broken_prefix(tree))
    tree_copy, prefix_copy = copy.deepcopy(tree), copy.deepcopy(prefix)
    with pytest.raises(PrefixError) as info:
        broadcast_prefix(prefix, tree, name="in_axes")
    assert info.value.path == bad_path
    assert re.search(f"the value at {re.escape(path_str(bad_path))}:", str(info.value))
    assert tree == tree_copy and prefix == prefix_copy


@jax.tree_util.register_pytree_with_keys_class
class InsertionOrdered:
    """A mapping node that flattens in insertion order (as a State written by hand does)."""

    def __init__(self, items: dict) -> None:
        self.items = dict(items)

    def tree_flatten_with_keys(self):
        keys = tuple(self.items)
        children = [(jax.tree_util.DictKey(k), v) for k, v in self.items.items()]
        return children, keys

    @classmethod
    def tree_unflatten(cls, keys, children):
        return cls(dict(zip(keys, children, strict=True)))


def test_a_mapping_prefix_with_its_keys_in_another_order_lines_up_by_key():
    value = InsertionOrdered({"bias": A1, "kernel": {"k": A2}})
    prefix = InsertionOrdered({"kernel": 1, "bias": 0})
    full = broadcast_prefix(prefix, value)
    assert list(full.items) == ["bias", "kernel"]
    assert full.items == {"bias": 0, "kernel": {"k": 1}}
    assert list(prefix.items) == ["kernel", "bias"]  # the caller's prefix is left as it was


def test_a_mapping_prefix_with_other_keys_still_names_both_key_lists():
    value = InsertionOrdered({"bias": A1, "kernel": A2})
    with pytest.raises(PrefixError, match=r"keys \['kernel', 'scale'\].*keys \['bias', 'kernel'\]"):
        broadcast_prefix(InsertionOrdered({"kernel": 1, "scale": 0}), value)
