"""`with_rngs`: copies of graphs with split, broadcast or forked rng streams; the
original keeps its structure and only its counts move on."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from bryo_filters import Not
from bryo_graph import Object
from bryo_rngs import Rngs, with_rngs


class Holder(Object):
    def __init__(self) -> None:
        self.rngs = Rngs(params=0, dropout=1)
        self.alias = self.rngs


def test_split_some_streams_and_fork_the_rest():
    rngs = Rngs(params=0, dropout=1)
    new = with_rngs(rngs, split={"params": 4}, fork=Not("params"))
    assert new.params.key.value.shape == (4,) and new.params.count.value.shape == (4,)
    assert new.dropout.key.value.shape == () and int(new.dropout.count.value) == 0
    # each replaced stream drew once from the original: its count moved on, nothing else
    assert int(rngs.params.count.value) == 1 and int(rngs.dropout.count.value) == 1
    assert rngs.params.key.value.shape == ()
    assert not jnp.array_equal(
        jax.random.key_data(new.dropout()), jax.random.key_data(rngs.dropout())
    )


def test_split_keys_differ_and_broadcast_keys_repeat():
    rngs = Rngs(0)
    split = with_rngs(rngs, split=3).default.key.value
    broadcast = with_rngs(rngs, broadcast=(2, 3)).default.key.value
    assert broadcast.shape == (2, 3)
    data = jax.random.key_data(split)
    assert not jnp.array_equal(data[0], data[1])
    flat = jax.random.key_data(broadcast).reshape(6, -1)
    assert all(jnp.array_equal(flat[0], row) for row in flat)


def test_streams_no_rule_selects_keep_their_variables_and_only_limits_the_rules():
    rngs = Rngs(params=0, dropout=1)
    new = with_rngs(rngs, split=2, only="dropout")
    assert new.params.key is rngs.params.key and new.params.count is rngs.params.count
    assert new.dropout.key.value.shape == (2,)
    assert with_rngs(rngs).params.count is rngs.params.count


def test_shared_references_stay_shared_in_graph_mode():
    holder = Holder()
    new = with_rngs(holder, broadcast=3)
    assert new is not holder and new.rngs is new.alias
    assert new.rngs.params.key.value.shape == (3,)
    assert holder.rngs.params.key.value.shape == ()  # the original keeps its structure


def test_split_comes_before_fork_and_two_named_rules_are_an_error():
    rngs = Rngs(params=0, dropout=1)
    assert with_rngs(rngs, split=2, fork=...).dropout.key.value.shape == (2,)
    rngs = Rngs(dropout=1, params=0)
    with pytest.raises(ValueError, match=r"\('params',\) is selected by multiple rules"):
        with_rngs(rngs, split={"params": 2}, fork="params")
    with pytest.raises(ValueError, match="takes an int or a tuple of ints"):
        with_rngs(rngs, split={"params": None})
    assert int(rngs.params.count.value) == 0  # nothing drawn by the failed calls
    assert int(rngs.dropout.count.value) == 0


def test_as_a_decorator_each_call_gets_copies():
    rngs = Rngs(0)

    @with_rngs(split=5)
    def shapes(rngs, scale):
        return rngs.default.key.value.shape, scale

    assert shapes(rngs, 2) == ((5,), 2)
    assert rngs.default.key.value.shape == () and int(rngs.default.count.value) == 1


def test_tree_mode_on_a_pytree():
    rngs = Rngs(0)
    new = with_rngs({"a": rngs}, split=2, graph=False)
    assert new["a"].default.key.value.shape == (2,)
