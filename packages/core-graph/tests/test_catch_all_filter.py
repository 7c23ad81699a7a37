"""`...`/`True` match everything: `split`/`state`/`State.filter` take them last (Flax NNX 0.12)."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from bryo_graph import Object, Param, State, Variable, split, state


class _Extra(Variable):
    pass


class _Pair(Object):
    def __init__(self) -> None:
        self.w = Param(jnp.zeros(2))
        self.n = _Extra(jnp.ones(()))


@pytest.mark.parametrize("catch_all", [..., True])
def test_split_refuses_catch_all_before_last(catch_all: object) -> None:
    pair = _Pair()
    first = r"`\.\.\.` or `True` can only be used as the last filters: .*got it at index 0 of 2"
    with pytest.raises(ValueError, match=first):
        split(pair, catch_all, Param)
    with pytest.raises(ValueError, match="Move it to the end"):
        state(pair, catch_all, Param)
    assert float(pair.n[...]) == 1.0  # the model is left as it was


def test_state_split_and_filter_refuse_catch_all_before_last() -> None:
    flat = State({"w": jnp.zeros(2), "n": jnp.ones(())})
    with pytest.raises(ValueError, match="index 0"):
        flat.split(..., Param)
    with pytest.raises(ValueError, match="index 1 of 3"):
        flat.filter(Param, ..., _Extra)
    assert set(flat.keys()) == {"w", "n"}


def test_catch_all_last_still_takes_the_rest() -> None:
    _, params, rest = split(_Pair(), Param, ...)
    assert set(params.keys()) == {"w"}
    assert set(rest.keys()) == {"n"}
