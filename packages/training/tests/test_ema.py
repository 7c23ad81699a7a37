"""EMA: a moving average of a model's Variables, updated in place, inside jit too."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_graph import BatchStat, Dict, Object, Param, State, Variable, data
from bryo_training import EMA
from bryo_transforms import jit


class Model(Object):
    def __init__(self):
        self.w = Param(jnp.ones(2), tag="weights")
        self.stat = BatchStat(jnp.zeros(2))

    def __call__(self, x):
        return x * self.w + self.stat


def test_update_moves_the_average_and_keeps_types_and_metadata():
    model = Model()
    ema = EMA(model, decay=0.9, only=Param)
    assert list(ema.params.flat_state()) == [("w",)]
    assert ema.params["w"] is not model.w and ema.params["w"].tag == "weights"
    model.w[...] = 3.0 * model.w[...]
    ema.update(model)
    np.testing.assert_allclose(ema.params["w"][...], 0.9 * 1.0 + 0.1 * 3.0)


def test_apply_to_shares_the_averages_and_follows_updates():
    model = Model()
    ema = EMA(model, decay=0.5, only=Param)
    averaged = ema.apply_to(model)
    assert averaged.w is ema.params["w"] and averaged.stat is model.stat  # the rest: the model's
    assert isinstance(averaged, Model)

    @jit
    def step(model, ema):
        model.w[...] += 2.0
        ema.update(model)

    step(model, ema)
    np.testing.assert_allclose(averaged.w[...], 2.0)
    np.testing.assert_allclose(averaged(jnp.ones(2)), 2.0)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match=r"`decay` must lie in \[0, 1\]"):
        EMA(Model(), decay=1.5)
    with pytest.raises(TypeError, match="the leaf at raw is a ArrayImpl"):
        EMA(Dict(raw=data(jnp.zeros(2))), decay=0.5)
    ema = EMA(Dict(a=Param(1.0), b=Param(2.0)), decay=0.5)
    with pytest.raises(ValueError, match="the model has no Variable at b"):
        ema.update(Dict(a=Param(3.0)))
    assert ema.params["a"].value == 1.0  # nothing changed


def test_ema_is_a_pytree():
    ema = EMA(Model(), decay=0.5)
    leaves = jax.tree.leaves(ema)
    assert len(leaves) == 2
    assert isinstance(ema.params, State)
    assert all(isinstance(v, Variable) for v in ema.params.flat_state().values())
