"""MoX files of every backend's models come back whole: `eval_mox(loads(dumps(mox)), ...)`
takes the arguments the traced MoX took (a model, its State, inputs) and gives its result,
in XML and YSON; the layers' primitives (`jnp.split` in Equinox's GRU/LSTM cells) load."""

from __future__ import annotations

import equinox as eqx
import flax.linen as linen
import jax
import jax.numpy as jnp
import pytest

import bryo_mox as mox_lib
from bryo import nnx
from bryo_mox.testing import assert_round_trip

X = jnp.linspace(-1.0, 1.0, 8, dtype=jnp.float32).reshape(2, 4)


@pytest.mark.parametrize("format", ["xml", "yson"])
def test_nnx_model_and_split_state(format):
    model = nnx.Sequential(nnx.Linear(4, 3, rngs=nnx.Rngs(0)), nnx.LayerNorm(3, rngs=nnx.Rngs(0)))
    assert_round_trip(mox_lib.make_mox(lambda m, v: m(v))(model, X), format, model, X)
    graphdef, state = nnx.split(model)
    apply = lambda s, v: nnx.merge(graphdef, s)(v)
    back = assert_round_trip(mox_lib.make_mox(apply)(state, X), format, state, X)
    with pytest.raises(mox_lib.MoxError, match=r"at `args\[0\]"):
        mox_lib.eval_mox(back, model, X)  # the model where its State was traced


@pytest.mark.parametrize("format", ["xml", "yson"])
@pytest.mark.parametrize("cell", [eqx.nn.GRUCell, eqx.nn.LSTMCell])
def test_equinox_recurrent_cells(cell, format):
    module = cell(4, 3, key=jax.random.key(0))
    hidden = jnp.zeros(3) if cell is eqx.nn.GRUCell else (jnp.zeros(3), jnp.zeros(3))
    mox = mox_lib.make_mox(lambda m, v, h: m(v, h))(module, X[0], hidden)
    assert_round_trip(mox, format, module, X[0], hidden)


@pytest.mark.parametrize("format", ["xml", "yson"])
def test_equinox_stateful_model_returns_its_state(format):
    model, state = eqx.nn.make_with_state(eqx.nn.BatchNorm)(4, axis_name="batch")

    def apply(m, s, v):
        return jax.vmap(m, axis_name="batch", in_axes=(0, None), out_axes=(0, None))(v, s)

    back = assert_round_trip(mox_lib.make_mox(apply)(model, state, X), format, model, state, X)
    _, new_state = mox_lib.eval_mox(back, model, state, X)
    assert isinstance(new_state, eqx.nn.State)


@pytest.mark.parametrize("format", ["xml", "yson"])
def test_linen_apply(format):
    module = linen.Dense(3)
    params = module.init(jax.random.key(0), X)
    assert_round_trip(mox_lib.make_mox(module.apply)(params, X), format, params, X)
