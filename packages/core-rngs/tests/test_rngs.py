"""Rngs semantics: fold_in/count, default fallback, errors, shorthands, fork, filters, jit."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bryo_graph as graph
from bryo_rngs import (
    RngCount,
    RngKey,
    Rngs,
    RngState,
    RngStream,
    UnknownStreamError,
    reseed,
)


def data(key: jax.Array) -> np.ndarray:
    return np.asarray(jax.random.key_data(key))


def same_key(a: jax.Array, b: jax.Array) -> bool:
    return np.array_equal(data(a), data(b))


def test_each_draw_is_fold_in_of_key_and_count():
    rngs = Rngs(params=0)
    root = rngs.params.key.value
    first, second = rngs.params(), rngs["params"]()
    assert same_key(first, jax.random.fold_in(jax.random.key(0), 0))
    assert same_key(second, jax.random.fold_in(jax.random.key(0), 1))
    assert int(rngs.params.count.value) == 2
    assert rngs.params.count.value.dtype == jnp.uint32
    assert rngs.params.key.value is root  # drawing never changes the key


def test_default_stream_is_the_fallback_and_the_call():
    rngs = Rngs(0, params=1)
    params_key = rngs.params()
    dropout_key = rngs.dropout()  # no dropout stream: the default one serves it
    default_key = rngs()
    assert same_key(params_key, jax.random.fold_in(jax.random.key(1), 0))
    assert same_key(dropout_key, jax.random.fold_in(jax.random.key(0), 0))
    assert same_key(default_key, jax.random.fold_in(jax.random.key(0), 1))
    assert int(rngs.default.count.value) == 2
    assert "dropout" not in rngs and "default" in rngs
    assert list(rngs) == ["default", "params"] and len(rngs) == 2


def test_seeds_may_be_keys_and_legacy_key_data():
    a = Rngs(params=jax.random.key(3), dropout=jax.random.PRNGKey(3), other=np.int32(3))
    keys = [a.params(), a.dropout(), a.other()]
    assert all(same_key(k, keys[0]) for k in keys)
    assert jnp.issubdtype(a.dropout.key.value.dtype, jax.dtypes.prng_key)


def test_missing_stream_without_default_names_it_and_the_streams_there_are():
    rngs = Rngs(params=0, noise=1)
    with pytest.raises(UnknownStreamError) as error:
        rngs.dropout()
    message = str(error.value)
    assert "'dropout'" in message and "'params'" in message and "'noise'" in message
    with pytest.raises(KeyError, match="dropout"):
        rngs["dropout"]
    with pytest.raises(AttributeError, match="'default'"):
        rngs()
    assert not hasattr(rngs, "dropout")
    assert int(rngs.params.count.value) == 0  # nothing was drawn


def test_bad_constructor_arguments_are_named():
    with pytest.raises(TypeError, match="`dropout`"):
        Rngs(dropout=1.5)
    with pytest.raises(TypeError, match=r"twice"):
        Rngs(0, default=1)
    with pytest.raises(ValueError, match=r"'fork'.*reserved"):
        Rngs(fork=0)
    with pytest.raises(ValueError, match="reserved"):
        Rngs(normal=0)


def test_array_probes_do_not_fall_back_to_the_default_stream():
    rngs = Rngs(0)
    assert not hasattr(rngs, "shape") and not hasattr(rngs, "dtype")
    assert not hasattr(rngs, "__jax_array__")


SHORTHANDS = [
    ("normal", ((2, 3),), {}),
    ("uniform", ((4,),), {"minval": -1.0, "maxval": 2.0}),
    ("bernoulli", (0.5, (10,)), {}),
    ("randint", ((5,), 0, 10), {}),
    ("choice", (jnp.arange(6), (3,)), {"replace": False}),
    ("permutation", (7,), {}),
    ("categorical", (jnp.log(jnp.array([0.2, 0.3, 0.5])),), {"shape": (4,)}),
    ("truncated_normal", (-1.0, 1.0, (3,)), {}),
    ("gumbel", ((2,),), {}),
    ("exponential", ((2,),), {}),
]


@pytest.mark.parametrize(("name", "args", "kwargs"), SHORTHANDS, ids=[s[0] for s in SHORTHANDS])
def test_shorthands_equal_jax_random_with_the_same_key(name, args, kwargs):
    function = getattr(jax.random, name)
    on_rngs, reference = Rngs(0, params=1), Rngs(0, params=1)
    np.testing.assert_array_equal(
        getattr(on_rngs, name)(*args, **kwargs), function(reference(), *args, **kwargs)
    )
    np.testing.assert_array_equal(
        getattr(on_rngs.params, name)(*args, **kwargs),
        function(reference.params(), *args, **kwargs),
    )
    assert int(on_rngs.default.count.value) == 1 and int(on_rngs.params.count.value) == 1


FORK_SPLIT = "'split' argument of 'fork' is deprecated; use the 'split' method"


def test_fork_splits_keys_and_counts_and_advances_the_parent():
    """`fork(split=...)` still works, with Flax NNX 0.12's DeprecationWarning."""
    parent = Rngs(1)
    with pytest.warns(DeprecationWarning, match=FORK_SPLIT) as record:
        forked = parent.fork(split=5)
    assert record[0].filename == __file__  # points at the caller
    assert forked.default.key.value.shape == (5,)
    assert forked.default.count.value.shape == (5,)
    assert int(parent.default.count.value) == 1
    assert parent.default.key.value.shape == ()
    with pytest.warns(DeprecationWarning, match=FORK_SPLIT):
        again = parent.fork(split=5)
    assert not np.array_equal(data(again.default.key.value), data(forked.default.key.value))
    with pytest.warns(DeprecationWarning, match=FORK_SPLIT) as record:
        stream = parent.default.fork(split=2)
    assert stream.key.value.shape == (2,) and record[0].filename == __file__


def test_fork_without_split_and_split_do_not_warn():
    parent = Rngs(params=0, dropout=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        parent.fork()
        parent.fork(split=None)
        parent.params.fork()
        assert parent.split(3).params.key.value.shape == (3,)
        assert parent.dropout.split(2).key.value.shape == (2,)


def test_fork_with_a_mapping_splits_only_the_selected_streams():
    parent = Rngs(params=0, dropout=1)
    with pytest.warns(DeprecationWarning, match=FORK_SPLIT):
        forked = parent.fork(split={"dropout": 4})
    assert forked.dropout.key.value.shape == (4,)
    assert forked.params.key.value.shape == ()
    # Unsplit streams are forked too: fresh keys, never the parent's next keys.
    assert not same_key(forked.params(), parent.params())
    assert forked.fork().params.key.value.shape == ()


def test_fork_of_a_split_stream_draw_is_explained():
    forked = Rngs(0).split(3)
    with pytest.raises(ValueError, match=r"split keys of shape \(3,\)"):
        forked()


def test_an_rngstream_passed_to_rngs_keeps_its_count():
    source = Rngs(params=0)
    drawn = [source.params() for _ in range(3)]
    copied = Rngs(params=source.params)
    assert int(copied.params.count.value) == 3
    assert not any(same_key(copied.params(), k) for k in drawn)


def test_tags_make_stream_names_filters():
    rngs = Rngs(params=0, dropout=1)
    assert rngs.dropout.key.tag == "dropout" and rngs.dropout.count.tag == "dropout"
    everything = graph.state(rngs, RngState)
    keys = graph.state(rngs, RngKey)
    counts = graph.state(rngs, RngCount)
    dropout = graph.state(rngs, "dropout")
    assert set(everything.flat_state()) == {
        ("params", "key"),
        ("params", "count"),
        ("dropout", "key"),
        ("dropout", "count"),
    }
    assert set(keys.flat_state()) == {("params", "key"), ("dropout", "key")}
    assert set(counts.flat_state()) == {("params", "count"), ("dropout", "count")}
    assert set(dropout.flat_state()) == {("dropout", "key"), ("dropout", "count")}


def test_counts_advance_under_jit_through_split_and_merge():
    rngs = Rngs(0, params=1)
    graphdef, state = graph.split(rngs)

    @jax.jit
    def draw(state):
        inner = graph.merge(graphdef, state)
        key = inner.params()
        noise = inner.normal((2,))
        return graph.split(inner)[1], key, noise

    new_state, key, noise = draw(state)
    graph.update(rngs, new_state)
    assert int(rngs.params.count.value) == 1 and int(rngs.default.count.value) == 1
    eager = Rngs(0, params=1)
    assert same_key(key, eager.params())
    np.testing.assert_array_equal(noise, eager.normal((2,)))
    assert same_key(rngs.params(), eager.params())


@settings(max_examples=20, deadline=None)
@given(
    seeds=st.dictionaries(
        st.sampled_from(["params", "dropout", "noise", "default"]),
        st.integers(0, 2**31 - 1),
        min_size=1,
    ),
    draws=st.integers(0, 3),
)
def test_split_merge_round_trip_keeps_keys_and_counts(seeds, draws):
    rngs = Rngs(**seeds)
    for _ in range(draws):
        for name in seeds:
            rngs[name]()
    rebuilt = graph.merge(*graph.split(rngs), copy=True)  # its own Variables
    assert isinstance(rebuilt, Rngs) and list(rebuilt) == list(rngs)
    for name in seeds:
        assert int(rebuilt[name].count.value) == draws
        assert same_key(rebuilt[name](), rngs[name]())


def test_repr_shows_streams_with_their_sizes():
    rngs = Rngs(0, params=1)
    rngs.params()
    text = repr(rngs)
    assert text.startswith(
        "Rngs( # RngState: 4 (24 B)\n  default=RngStream( # RngState: 2 (12 B)\n"
    )
    assert (  # keys and counts count as one RngState entry, as in Flax
        "  params=RngStream( # RngState: 2 (12 B)\n"
        "    tag='params',\n"
        "    key=RngKey( # 1 (8 B)\n"
        "      value=key<fry>[],\n"
        "      tag='params'\n"
        "    ),\n"
        "    count=RngCount( # 1 (4 B)\n"
        "      value=u32[] 1,\n"
        "      tag='params'\n"
        "    )\n"
        "  )\n"
        ")"
    ) in text
    assert repr(rngs.params) in text.replace("\n  ", "\n")  # a stream prints the same alone
    assert repr(Rngs()) == "Rngs()"
    assert isinstance(Rngs(0).default, RngStream)


# reseed ------------------------------------------------------------------------------


def test_reseed_of_an_rngs_makes_it_like_a_fresh_one():
    rngs = Rngs(params=0, dropout=5)
    for _ in range(3):
        rngs.params(), rngs.dropout()
    reseed(rngs, params=7)
    fresh = Rngs(params=7)
    assert same_key(rngs.params(), fresh.params())
    assert int(rngs.dropout.count.value) == 3  # not named: untouched


class Holder(graph.Object):
    """A layer-like node keeping a stream forked at construction (as Dropout does)."""

    def __init__(self, rngs: Rngs) -> None:
        self.rngs = rngs.dropout.fork()


def test_reseed_of_a_forked_stream_replays_its_first_keys():
    layer = Holder(Rngs(dropout=1))
    first = [layer.rngs() for _ in range(2)]
    reseed(layer, dropout=1)
    assert all(same_key(layer.rngs(), k) for k in first)


def test_reseed_rejects_unknown_names_and_changes_nothing():
    rngs = Rngs(params=0, dropout=1)
    rngs.params()
    with pytest.raises(ValueError, match=r"\['dropuot'\].*\['dropout', 'params'\]"):
        reseed(rngs, params=3, dropuot=1)
    assert int(rngs.params.count.value) == 1
    assert same_key(rngs.params.key.value, jax.random.key(0))


def test_reseed_of_split_streams_needs_a_policy():
    rngs = Rngs(dropout=0).split(3)
    with pytest.raises(ValueError, match=r"match_shape"):
        reseed(rngs, dropout=1)
    reseed(rngs, dropout=1, policy="match_shape")
    assert rngs.dropout.key.value.shape == (3,)
    assert np.array_equal(
        data(rngs.dropout.key.value), data(jax.random.split(jax.random.key(1), 3))
    )
    with pytest.raises(ValueError, match="`policy`"):
        reseed(rngs, dropout=1, policy="nope")


@pytest.mark.skipif(jax.__version_info__ < (0, 10), reason="hijax Variables need JAX 0.10")
def test_hijax_rngs_draw_fresh_keys_under_plain_jit():
    with graph.var_defaults(hijax=True):
        rngs = Rngs(0, params=1)
    assert rngs.default.key.hijax and isinstance(rngs.default.count, RngCount)
    draw = jax.jit(lambda rngs: (rngs(), rngs.params()))
    (a, p), (b, _) = draw(rngs), draw(rngs)
    assert not np.array_equal(data(a), data(b))
    assert int(rngs.default.count[...]) == 2 and int(rngs.params.count[...]) == 2
    plain = Rngs(0, params=1)
    np.testing.assert_array_equal(data(a), data(plain()))
    np.testing.assert_array_equal(data(p), data(plain.params()))


@pytest.mark.skipif(jax.__version_info__ >= (0, 10), reason="this JAX has hijax")
def test_hijax_rngs_on_old_jax_name_the_version_needed():
    with graph.var_defaults(hijax=True), pytest.raises(ValueError, match=r"JAX 0\.10 or newer"):
        Rngs(0)


def test_a_count_prints_its_value_in_a_state_as_flax_shows_it():
    """A State printout used to show a count by its type only (`u32[]`)."""
    rngs = Rngs(0)
    rngs()
    assert repr(rngs.default.count) == "RngCount(value=Array(1, dtype=uint32), tag='default')"
    assert "'count': RngCount(value=Array(1, dtype=uint32), tag='default')" in repr(
        graph.state(rngs)
    )
    assert repr(rngs.split(3).default.count) == "RngCount(value=u32[3], tag='default')"
    assert repr(rngs.default.key) == "RngKey(value=key<fry>[], tag='default')"  # keys stay short
