"""The in-place split/restore primitive, the anchor's traps it must avoid, and
`split_rngs`/`fork_rngs` around a call (their use with the lifted transforms is tested
in core-transforms)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bryo_graph as graph
from bryo_rngs import (
    Rngs,
    RngState,
    fork_rngs,
    reseed,
    restore_rngs,
    split_rngs,
    split_rngs_in_place,
)


def data(key: jax.Array) -> np.ndarray:
    return np.asarray(jax.random.key_data(key))


def all_distinct(keys: list[jax.Array]) -> bool:
    rows = [tuple(row) for k in keys for row in data(k).reshape(-1, data(k).shape[-1])]
    return len(rows) == len(set(rows))


def vmapped_draws(rngs: Rngs, name: str) -> jax.Array:
    """Draw once per split key, as a vmap over axis 0 of the stream's state would."""
    graphdef, state = graph.split(rngs)

    def draw(stream_state):
        inner = graph.merge(graphdef, stream_state)
        key = inner[name]()
        return key, graph.state(inner)

    keys, new_state = jax.vmap(draw)(state)
    graph.update(rngs, new_state)
    return keys


def test_split_keys_and_counts_get_the_leading_axis():
    rngs = Rngs(params=0, dropout=1)
    token = split_rngs_in_place(rngs, {"dropout": 5})
    assert rngs.dropout.key.value.shape == (5,) and rngs.dropout.count.value.shape == (5,)
    assert rngs.params.key.value.shape == ()
    assert token.paths == [("dropout",)]
    restore_rngs(token)
    assert rngs.dropout.key.value.shape == () and rngs.dropout.count.value.shape == ()


def test_no_replay_of_keys_drawn_inside_after_restore():
    rngs = Rngs(dropout=1)
    before = [rngs.dropout() for _ in range(2)]
    with split_rngs_in_place(rngs, 4):
        inside = [vmapped_draws(rngs, "dropout") for _ in range(2)]
    # Restored to the original key with the count one past the split's draw.
    assert np.array_equal(data(rngs.dropout.key.value), data(jax.random.key(1)))
    assert int(rngs.dropout.count.value) == 3
    after = [rngs.dropout() for _ in range(3)]
    with split_rngs_in_place(rngs, 4):
        second_split = vmapped_draws(rngs, "dropout")
    assert all_distinct([*before, *inside, *after, second_split])


def test_streams_left_out_of_the_mapping_keep_their_count_and_draws_inside():
    """Trap: streams not in the mapping restarting their count and replaying keys."""
    rngs = Rngs(params=0, dropout=1)
    earlier = [rngs.params(), rngs.params()]
    token = split_rngs_in_place(rngs, {"dropout": 3})
    assert int(rngs.params.count.value) == 2  # untouched, not restarted
    inside = rngs.params()  # drawing from an unsplit stream inside is fine
    restore_rngs(token)
    assert int(rngs.params.count.value) == 3  # the draw inside is not clobbered
    after = rngs.params()
    assert all_distinct([*earlier, inside, after])


def test_restore_keeps_streams_reset_in_between():
    rngs = Rngs(dropout=1)
    token = split_rngs_in_place(rngs, {"dropout": 3})
    reseed(rngs, dropout=9, policy="match_shape")
    restore_rngs(token)  # still split: put back as usual
    assert rngs.dropout.key.value.shape == ()
    token = split_rngs_in_place(rngs, {"dropout": 3})
    rngs.dropout.key.value = jax.random.key(42)  # something put a single key back
    rngs.dropout.count.value = jnp.asarray(7, jnp.uint32)
    restore_rngs(token)
    assert np.array_equal(data(rngs.dropout.key.value), data(jax.random.key(42)))
    assert int(rngs.dropout.count.value) == 7


class Layer(graph.Object):
    """Keeps a stream forked at construction, as bryo_nnx's Dropout does."""

    def __init__(self, rngs: Rngs) -> None:
        self.rngs = rngs.dropout.fork()

    def __call__(self, x: jax.Array) -> jax.Array:
        return jnp.where(jax.random.bernoulli(self.rngs(), 0.5, x.shape), x, 0.0)


def test_restore_does_not_break_a_later_scan_over_layers_built_inside():
    """Trap: restoring split keys on exit turning a built stack back into one key."""
    rngs = Rngs(0)
    with split_rngs_in_place(rngs, 4):
        graphdef, state = graph.split(rngs)

        def build(stream_state):
            layer = Layer(graph.merge(graphdef, stream_state))
            return graph.split(layer)[1]

        stack_state = jax.vmap(build)(state)
    assert rngs.default.key.value.shape == ()  # the caller's stream is restored
    layer_def = graph.graphdef(Layer(Rngs(0)))
    stack = graph.merge(layer_def, stack_state)
    assert stack.rngs.key.value.shape == (4,)  # ...and the stack keeps its 4 keys

    def step(x, layer_state):
        layer = graph.merge(layer_def, layer_state)
        y = layer(x)
        return x, (y, graph.state(layer))

    _, (masks, new_states) = jax.lax.scan(step, jnp.ones(32), graph.state(stack))
    graph.update(stack, new_states)
    assert masks.shape == (4, 32)
    assert len({tuple(np.asarray(m)) for m in masks}) == 4  # four layers, four masks
    assert np.array_equal(np.asarray(stack.rngs.count.value), np.ones(4, np.uint32))


def test_context_manager_restores_on_error():
    rngs = Rngs(dropout=1)
    with pytest.raises(RuntimeError), split_rngs_in_place(rngs, 2):
        raise RuntimeError
    assert rngs.dropout.key.value.shape == ()


def test_nested_splits_stack_axes_in_front_and_unwind():
    rngs = Rngs(dropout=1)
    outer = split_rngs_in_place(rngs, 5)
    inner = split_rngs_in_place(rngs, (2, 3))
    assert rngs.dropout.key.value.shape == (2, 3, 5)
    assert rngs.dropout.count.value.shape == (2, 3, 5)
    assert np.array_equal(np.asarray(outer._backups[0].count), np.zeros((), np.uint32) + 1)
    restore_rngs(inner)
    assert rngs.dropout.key.value.shape == (5,)
    assert np.array_equal(np.asarray(rngs.dropout.count.value), np.ones(5, np.uint32))
    restore_rngs(outer)
    restore_rngs(outer)  # a second restore does nothing
    assert rngs.dropout.key.value.shape == ()


def test_none_forks_in_place_without_splitting():
    rngs = Rngs(params=0, dropout=1)
    old = data(rngs.dropout.key.value)
    with split_rngs_in_place(rngs, {"dropout": None, "params": 2}):
        assert rngs.dropout.key.value.shape == ()
        assert not np.array_equal(data(rngs.dropout.key.value), old)
        assert rngs.params.key.value.shape == (2,)
    assert np.array_equal(data(rngs.dropout.key.value), old)


def test_only_selects_streams_for_an_int_split():
    rngs = Rngs(params=0, dropout=1)
    with split_rngs_in_place(rngs, 3, only="params") as token:
        assert rngs.params.key.value.shape == (3,) and rngs.dropout.key.value.shape == ()
        assert "active" in repr(token)
    with split_rngs_in_place({"a": rngs}, {RngState: 2}):
        assert rngs.params.key.value.shape == (2,) and rngs.dropout.key.value.shape == (2,)


def test_bad_split_values_are_rejected_before_anything_changes():
    rngs = Rngs(dropout=1)
    for bad in (0, -1, 2.5, True, (2, 0)):
        with pytest.raises(ValueError, match="`split`"):
            split_rngs_in_place(rngs, {"dropout": bad})
    assert int(rngs.dropout.count.value) == 0 and rngs.dropout.key.value.shape == ()


def test_split_under_jit():
    rngs = Rngs(dropout=1)
    graphdef, state = graph.split(rngs)

    @jax.jit
    def f(state):
        inner = graph.merge(graphdef, state)
        with split_rngs_in_place(inner, 3):
            keys = jax.vmap(jax.random.key_data)(inner.dropout.key.value)
        return keys, graph.state(inner)

    keys, new_state = f(state)
    graph.update(rngs, new_state)
    assert keys.shape == (3, 2) and int(rngs.dropout.count.value) == 1


def test_split_rngs_as_context_manager_and_token() -> None:
    rngs = Rngs(params=0, dropout=1)
    with split_rngs(rngs, splits=3, only="dropout") as token:
        assert rngs.dropout.key.value.shape == (3,)
        assert rngs.params.key.value.shape == ()
        assert token.paths
    assert rngs.dropout.key.value.shape == ()
    with fork_rngs(rngs, split={"params": 2}):
        assert rngs.params.key.value.shape == (2,)
        assert rngs.dropout.key.value.shape == ()
    assert rngs.params.key.value.shape == ()


def test_split_rngs_and_fork_rngs_as_decorators_restore_after_the_call() -> None:
    rngs = Rngs(params=0, dropout=1)
    seen = {}

    @split_rngs(splits=3, only="dropout")
    def split_call(r: Rngs) -> None:
        seen["split"] = (r.dropout.key.value.shape, r.params.key.value.shape)

    @fork_rngs(split={"params": 2})
    def fork_call(r: Rngs) -> None:
        seen["fork"] = (r.dropout.key.value.shape, r.params.key.value.shape)

    split_call(rngs)
    fork_call(r=rngs)  # keyword arguments are split too
    assert seen == {"split": ((3,), ()), "fork": ((), (2,))}
    assert rngs.dropout.key.value.shape == () and rngs.params.key.value.shape == ()
    # Each split or fork draws once from the streams it touches: nothing is replayed.
    assert int(rngs.dropout.count.value) == 2 and int(rngs.params.count.value) == 1
