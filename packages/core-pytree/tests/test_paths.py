"""Paths as plain tuples: conversion from and to jax key paths, flatten to a dict and back."""

from __future__ import annotations

import copy
import re
from collections import OrderedDict, namedtuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.tree_util import (
    DictKey,
    FlattenedIndexKey,
    GetAttrKey,
    SequenceKey,
    keystr,
    register_pytree_node,
    tree_flatten_with_path,
    tree_leaves,
    tree_structure,
)

from bryo_pytree import (
    flatten_to_paths,
    flatten_with_treedef,
    key_to_plain,
    keypath_to_path,
    path_str,
    path_to_keypath,
    pytree_dataclass,
    static_field,
    unflatten_paths,
)
from bryo_pytree._paths import _PATH_CACHE

Point = namedtuple("Point", ["x", "y"])


@pytree_dataclass
class Linear:
    kernel: object
    bias: object
    name: str = static_field(default="linear")


class Opaque:
    """Registered without keys: jax names its children with `FlattenedIndexKey`."""

    def __init__(self, a, b):
        self.a, self.b = a, b


register_pytree_node(Opaque, lambda o: ((o.a, o.b), None), lambda _, ch: Opaque(*ch))


def model():
    return {
        "layers": [
            Linear(jnp.ones((2, 3)), jnp.zeros(3)),
            Linear(jnp.ones((3, 1)), jnp.zeros(1), name="head"),
        ],
        "point": Point(1.0, (2.0, None)),
        "opaque": Opaque(3.0, [4.0]),
        "empty": {},
    }


def same_tree(a, b) -> bool:
    return tree_structure(a) == tree_structure(b) and all(
        x is y for x, y in zip(tree_leaves(a), tree_leaves(b), strict=True)
    )


# --- key_to_plain / keypath_to_path / path_str -----------------------------------------


@pytest.mark.parametrize(
    ("key", "plain"),
    [
        (DictKey("a"), "a"),
        (DictKey(3), 3),
        (SequenceKey(2), 2),
        (GetAttrKey("kernel"), "kernel"),
        (FlattenedIndexKey(1), 1),
    ],
)
def test_key_to_plain(key, plain):
    assert key_to_plain(key) == plain


@pytest.mark.parametrize("bad", ["a", 0, ("a",), None])
def test_key_to_plain_rejects_non_keys(bad):
    with pytest.raises(TypeError, match=r"`key` must be a jax\.tree_util path entry"):
        key_to_plain(bad)


def test_keypath_to_path_on_a_model():
    paths = [keypath_to_path(kp) for kp, _ in tree_flatten_with_path(model())[0]]
    assert paths == [
        ("layers", 0, "kernel"),
        ("layers", 0, "bias"),
        ("layers", 1, "kernel"),
        ("layers", 1, "bias"),
        ("opaque", 0),
        ("opaque", 1, 0),
        ("point", "x"),
        ("point", "y", 0),
    ]


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ((), "<root>"),
        (("a",), "a"),
        ((0,), "[0]"),
        (("layers", 0, "kernel"), "layers[0].kernel"),
        ((1, "x", 2, 3), "[1].x[2][3]"),
    ],
)
def test_path_str(path, text):
    assert path_str(path) == text


# --- path_to_keypath -------------------------------------------------------------------


def test_path_to_keypath_without_tree_guesses_dict_and_sequence_keys():
    assert path_to_keypath(("layers", 0, "kernel")) == (
        DictKey("layers"),
        SequenceKey(0),
        DictKey("kernel"),
    )
    assert path_to_keypath(()) == ()


def test_path_to_keypath_with_tree_uses_jaxs_own_keys():
    tree = model()
    assert path_to_keypath(("layers", 1, "bias"), tree) == (
        DictKey("layers"),
        SequenceKey(1),
        GetAttrKey("bias"),
    )
    assert path_to_keypath(("point", "y", 0), tree) == (
        DictKey("point"),
        GetAttrKey("y"),
        SequenceKey(0),
    )
    assert path_to_keypath(("opaque", 1), tree) == (DictKey("opaque"), FlattenedIndexKey(1))
    assert keystr(path_to_keypath(("layers", 0, "kernel"), tree)) == "['layers'][0].kernel"


def test_path_to_keypath_reaches_inner_nodes_and_empty_containers():
    tree = model()
    assert path_to_keypath(("empty",), tree) == (DictKey("empty"),)
    assert path_to_keypath(("layers", 0), tree) == (DictKey("layers"), SequenceKey(0))
    assert path_to_keypath((), tree) == ()
    assert path_to_keypath((3,), {3: "int key"}) == (DictKey(3),)


def test_path_to_keypath_names_the_missing_step():
    with pytest.raises(KeyError) as info:
        path_to_keypath(("layers", 0, "weight"), model())
    assert str(info.value) == (
        "path layers[0].weight is not in the tree: at layers[0] there is no key 'weight', "
        "the tree has keys 'kernel', 'bias' there. Check the path against "
        "`flatten_to_paths(tree)`."
    )


def test_path_to_keypath_through_a_leaf():
    with pytest.raises(KeyError, match=r"at point\.x there is no key 0, the tree has a leaf"):
        path_to_keypath(("point", "x", 0), model())


def test_path_to_keypath_out_of_range():
    with pytest.raises(KeyError, match=r"at layers there is no key 5, the tree has keys 0, 1"):
        path_to_keypath(("layers", 5), model())


# --- flatten_to_paths / flatten_with_treedef / unflatten_paths -------------------------


def test_flatten_to_paths_matches_jax_order_and_leaves():
    tree = model()
    flat = flatten_to_paths(tree)
    with_path = tree_flatten_with_path(tree)[0]
    assert list(flat) == [keypath_to_path(kp) for kp, _ in with_path]
    assert all(a is b for a, b in zip(flat.values(), tree_leaves(tree), strict=True))


def test_flatten_to_paths_doc_example():
    assert flatten_to_paths({"b": [1, 2], "a": 3}) == {("a",): 3, ("b", 0): 1, ("b", 1): 2}
    assert flatten_to_paths(5) == {(): 5}
    assert flatten_to_paths(None) == {}


def test_flatten_to_paths_is_leaf_stops_early():
    tree = {"a": [1, 2], "b": (3, 4)}
    flat = flatten_to_paths(tree, is_leaf=lambda x: isinstance(x, list))
    assert flat == {("a",): [1, 2], ("b", 0): 3, ("b", 1): 4}


def test_round_trip_keeps_types_and_static_fields():
    tree = model()
    flat, treedef = flatten_with_treedef(tree)
    back = unflatten_paths(flat, treedef)
    assert same_tree(back, tree)
    assert back["layers"][1].name == "head"
    assert isinstance(back["point"], Point)
    assert isinstance(back["opaque"], Opaque)


def test_unflatten_paths_accepts_any_order_and_never_mutates_flat():
    tree = model()
    flat, treedef = flatten_with_treedef(tree)
    shuffled = dict(reversed(list(flat.items())))
    before = dict(shuffled)
    assert same_tree(unflatten_paths(shuffled, treedef), tree)
    assert list(shuffled.items()) == list(before.items())


def test_unflatten_paths_with_new_leaves_under_jit():
    tree = {"w": jnp.ones(3), "b": [jnp.zeros(2)]}
    flat, treedef = flatten_with_treedef(tree)

    @jax.jit
    def double(flat):
        return {path: 2 * leaf for path, leaf in flat.items()}

    out = unflatten_paths(double(flat), treedef)
    np.testing.assert_array_equal(out["w"], 2 * np.ones(3))
    assert tree_structure(out) == treedef


def test_unflatten_paths_names_missing_and_extra_paths():
    _flat, treedef = flatten_with_treedef({"a": [1, 2], "b": 3})
    with pytest.raises(KeyError) as info:
        unflatten_paths({("a", 0): 1, ("c",): 2}, treedef)
    assert str(info.value) == (
        "`flat` does not fit `treedef`: missing paths a[1], b; unexpected path c. Pass the "
        "dict returned by `flatten_with_treedef` for the same tree, with only its leaves "
        "changed."
    )


def test_unflatten_paths_lists_at_most_five_missing_paths():
    _flat, treedef = flatten_with_treedef(list(range(8)))
    with pytest.raises(
        KeyError,
        match=r"missing paths \[0\], \[1\], \[2\], \[3\], \[4\], \.\.\. "
        r"\(8 in all\)\.",
    ):
        unflatten_paths({}, treedef)


def test_unflatten_paths_with_a_treedef_it_has_not_seen():
    """A treedef built elsewhere (not by `flatten_with_treedef`) still works."""
    _PATH_CACHE.clear()
    treedef = tree_structure({"a": (0, 0), "b": Point(0, 0)})
    out = unflatten_paths({("b", "y"): 4, ("b", "x"): 3, ("a", 1): 2, ("a", 0): 1}, treedef)
    assert out == {"a": (1, 2), "b": Point(3, 4)}


def test_unflatten_paths_without_treedef_nests_dicts():
    assert unflatten_paths({("a", "x"): 1, ("a", 0): 2, ("b",): 3}) == {
        "a": {"x": 1, 0: 2},
        "b": 3,
    }
    assert unflatten_paths({}) == {}


def test_unflatten_paths_without_treedef_rejects_paths_through_leaves():
    with pytest.raises(ValueError, match=r"a leaf at a and also the path a\.x below it"):
        unflatten_paths({("a",): 1, ("a", "x"): 2})
    with pytest.raises(ValueError, match=r"a leaf at a and also paths below it"):
        unflatten_paths({("a", "x"): 2, ("a",): 1})
    with pytest.raises(ValueError, match="the empty path names the whole tree"):
        unflatten_paths({(): 1})


def test_unflatten_paths_without_treedef_never_writes_into_a_dict_leaf():
    leaf = {}
    with pytest.raises(ValueError, match="a leaf at a"):
        unflatten_paths({("a",): leaf, ("a", "x"): 1})
    assert leaf == {}


def test_unhashable_node_data_is_not_cached_but_still_works():
    class WithArrayMeta:
        def __init__(self, x, meta):
            self.x, self.meta = x, meta

    register_pytree_node(
        WithArrayMeta,
        lambda o: ((o.x,), o.meta),
        lambda meta, children: WithArrayMeta(children[0], meta),
    )
    tree = [WithArrayMeta(1.0, np.arange(3)), WithArrayMeta(2.0, np.arange(3))]
    for _ in range(2):
        flat, treedef = flatten_with_treedef(tree)
        assert flat == {(0, 0): 1.0, (1, 0): 2.0}
    back = unflatten_paths(flat, treedef)
    assert [o.x for o in back] == [1.0, 2.0]


def test_ordered_dict_keeps_its_order():
    tree = OrderedDict([("z", 1), ("a", 2)])
    flat, treedef = flatten_with_treedef(tree)
    assert list(flat) == [("z",), ("a",)]
    assert unflatten_paths(flat, treedef) == tree


# --- hypothesis round trips ------------------------------------------------------------

# Tree generation dominates these tests' time; 40 trees per property keep the file fast.
properties = settings(max_examples=40, deadline=None)


@properties
@given(data=st.data())
def test_paths_agree_with_jax_for_random_trees(strategies, data):
    tree = data.draw(strategies.trees())
    flat = flatten_to_paths(tree)
    with_path = tree_flatten_with_path(tree)[0]
    assert list(flat) == [keypath_to_path(kp) for kp, _ in with_path]
    assert list(flat.values()) == [leaf for _, leaf in with_path]
    for keypath, _ in with_path:
        path = keypath_to_path(keypath)
        assert path_to_keypath(path, tree) == keypath
        assert path_to_keypath(path) == keypath  # dicts with str keys, lists and tuples only


@properties
@given(data=st.data())
def test_round_trip_for_random_trees(strategies, data):
    tree = data.draw(strategies.trees())
    original = copy.deepcopy(tree)
    flat, treedef = flatten_with_treedef(tree)
    assert unflatten_paths(flat, treedef) == tree == original
    order = data.draw(st.permutations(list(flat)))
    assert unflatten_paths({p: flat[p] for p in order}, treedef) == tree
    named = unflatten_paths({p: path_str(p) for p in flat}, treedef)
    assert tree_structure(named) == treedef
    assert flatten_to_paths(named) == {p: path_str(p) for p in flat}


@properties
@given(data=st.data())
def test_missing_or_extra_path_is_named(strategies, data):
    tree = data.draw(strategies.trees())
    flat, treedef = flatten_with_treedef(tree)
    if flat:
        dropped = data.draw(st.sampled_from(list(flat)))
        partial = {p: v for p, v in flat.items() if p != dropped}
        with pytest.raises(KeyError, match=f"missing path {re.escape(path_str(dropped))}"):
            unflatten_paths(partial, treedef)
    with pytest.raises(KeyError, match=r"unexpected path not\.there"):
        unflatten_paths({**flat, ("not", "there"): 0}, treedef)


@properties
@given(data=st.data())
def test_nesting_without_treedef_round_trips_dict_trees(strategies, data):
    dict_trees = st.recursive(
        strategies.leaves,
        lambda children: st.dictionaries(strategies.keys, children, min_size=1, max_size=4),
        max_leaves=12,
    ).filter(lambda t: isinstance(t, dict))
    tree = data.draw(dict_trees)
    assert unflatten_paths(flatten_to_paths(tree)) == tree


def test_path_cache_is_bounded_by_the_paths_it_holds():
    from bryo_pytree._paths import _PathCache

    cache = _PathCache(max_paths=5)
    small, big = tree_structure([0, 0]), tree_structure([0, 0, 0])
    cache.put(small, ((0,), (1,)))
    cache.put(big, ((0,), (1,), (2,)))
    assert cache.get(tree_structure([1, 2])) == ((0,), (1,))
    cache.put(tree_structure((0,)), ((0,),))  # 6 paths > 5: the oldest entry goes
    assert cache.get(tree_structure([5, 6])) is None
    assert cache.get(tree_structure([5, 6, 7])) == ((0,), (1,), (2,))
    cache.put(tree_structure(list(range(6))), tuple((i,) for i in range(6)))  # too big
    assert cache.get(tree_structure(list(range(6)))) is None


def test_equal_structures_share_paths_but_keep_their_own_leaves():
    first = flatten_to_paths({"a": [1, 2]})
    second = flatten_to_paths({"a": [3, 4]})
    assert first == {("a", 0): 1, ("a", 1): 2}
    assert second == {("a", 0): 3, ("a", 1): 4}
