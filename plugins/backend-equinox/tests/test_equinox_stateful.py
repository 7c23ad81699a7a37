"""Stateful layers: `eqx.nn.State`, `StateIndex` and `BatchNorm` through bryo's State."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_equinox import updated
from bryo_graph import (
    BatchStat,
    GraphError,
    Param,
    flat_graph,
    graphdef,
    merge,
    split,
    state,
    update,
)


class Net(eqx.Module):
    linear: eqx.nn.Linear
    norm: eqx.nn.BatchNorm

    def __init__(self, key):
        self.linear = eqx.nn.Linear(3, 4, key=key)
        self.norm = eqx.nn.BatchNorm(4, axis_name="batch", mode="ema")

    def __call__(self, x, state):
        return self.norm(self.linear(x), state)


MODEL, STATE = eqx.nn.make_with_state(Net)(jax.random.key(0))
X = jnp.arange(6.0).reshape(2, 3)


@eqx.filter_jit
def forward(model, x, state):
    run = jax.vmap(
        lambda x, s: model(x, s), in_axes=(0, None), out_axes=(0, None), axis_name="batch"
    )
    return run(x, state)


def test_state_values_are_batch_stats_and_model_arrays_params():
    _, params, stats = split((MODEL, STATE), Param, BatchStat)
    assert {p[:2] for p in params.flat_state()} == {(0, "linear"), (0, "norm")}
    assert {p[0] for p in stats.flat_state()} == {1}
    assert all(v.type is BatchStat for v in stats.flat_state().values())
    assert len(stats.flat_state()) == len(jax.tree_util.tree_leaves(STATE))


def test_split_merge_run_and_carry_the_state():
    graphdef, params, stats = split((MODEL, STATE), Param, BatchStat)
    model, eqx_state = merge(graphdef, params, stats)
    y, new_state = forward(model, X, eqx_state)
    y_ref, ref_state = forward(MODEL, X, _fresh_state())
    np.testing.assert_allclose(y, y_ref, rtol=1e-6)
    new_stats = state(new_state, BatchStat)
    assert jax.tree_util.tree_all(
        jax.tree_util.tree_map(
            np.array_equal,
            jax.tree_util.tree_leaves(new_stats),
            jax.tree_util.tree_leaves(ref_state),
        )
    )
    # The new statistics go back into bryo's State under the same paths as before.
    moved = updated(STATE, new_stats)
    assert all(
        np.array_equal(a, b)
        for a, b in zip(
            jax.tree_util.tree_leaves(moved), jax.tree_util.tree_leaves(ref_state), strict=True
        )
    )


def _fresh_state():
    return eqx.nn.make_with_state(Net)(jax.random.key(0))[1]


def test_update_of_an_eqx_state_points_to_merge():
    new = jax.tree_util.tree_map(lambda v: v + jnp.ones((), v.dtype), state(STATE))
    with pytest.raises(GraphError, match="merge"):
        update(STATE, new)


def test_state_index_initial_values_are_batch_stats():
    norm = eqx.nn.BatchNorm(4, axis_name="batch", mode="batch")
    _, params, stats = split(norm, Param, BatchStat)
    assert set(params.flat_state()) == {("weight",), ("bias",)}
    assert stats.flat_state() and all(p[1] == "init" for p in stats.flat_state())
    _, eqx_state = eqx.nn.make_with_state(lambda: merge(*split(norm)))()
    assert len(jax.tree_util.tree_leaves(eqx_state)) == len(stats.flat_state())


def test_a_used_state_is_refused_clearly():
    _, old = eqx.nn.make_with_state(Net)(jax.random.key(0))
    index = MODEL.norm.ema_state_index
    old.set(index, old.get(index))
    with pytest.raises(ValueError, match="already used"):
        split(old)


def test_a_state_bryo_built_reads_as_built_once_used():
    # A transform reads its inputs back after the call; the State it built for the
    # function was emptied by the layer's call, and reads as built (nothing was written
    # into it). A State bryo did not build still refuses (above).
    graphdef, stats = split(STATE)
    built = merge(graphdef, stats)
    index = MODEL.norm.ema_state_index
    newer = built.set(index, jax.tree_util.tree_map(lambda v: v + 1, built.get(index)))
    assert jax.tree_util.tree_all(jax.tree_util.tree_map(np.array_equal, state(built), stats))
    assert not jax.tree_util.tree_all(jax.tree_util.tree_map(np.array_equal, state(newer), stats))


class _Holder(eqx.Module):
    state: eqx.nn.State


@pytest.mark.parametrize("wrap", [lambda s: s, _Holder], ids=["state", "module-holding-it"])
def test_a_used_state_is_refused_also_once_its_flattening_is_cached(wrap):
    # core-graph caches an immutable root's flattening; Equinox empties a used State
    # behind bryo's back, so the cached flattening must not hand out its old values.
    _, fresh = eqx.nn.make_with_state(Net)(jax.random.key(0))
    root = wrap(fresh)
    assert flat_graph(root) is flat_graph(root)  # cached while the State is valid
    before = jax.tree_util.tree_leaves(state(root, BatchStat))
    index = MODEL.norm.ema_state_index
    newer = fresh.set(index, jax.tree_util.tree_map(lambda v: v + 1, fresh.get(index)))
    for read in (split, state, graphdef):
        with pytest.raises(ValueError, match="already used"):
            read(root)
    # the newer State splits, with its own values, and merges back
    graphdef_, stats = split(newer)
    after = jax.tree_util.tree_leaves(stats)
    assert not all(np.array_equal(a, b) for a, b in zip(after, before, strict=True))
    again = merge(graphdef_, stats)
    assert jax.tree_util.tree_all(jax.tree_util.tree_map(np.array_equal, state(again), stats))


def test_a_state_bryo_built_keeps_its_cached_flattening_once_used():
    built = merge(*split(_fresh_state()))
    flat = flat_graph(built)
    index = MODEL.norm.ema_state_index
    built.set(index, built.get(index))  # Equinox empties it; it reads as built
    assert flat_graph(built) is flat
