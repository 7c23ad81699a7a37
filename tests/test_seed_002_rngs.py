"""Seed 002 (Flax NNX randomness): every cell that needs no lifted transform, on bryo.

The cells run as written, with `from bryo import nnx` for `from flax import nnx` and the
seed's `random` being `jax.random`. The vmap/scan/jit/fork_rngs cells are in the
transforms' acceptance test.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from bryo import nnx
from jax import random


class Model(nnx.Module):  # the explicit-style model of the first cell
    def __init__(self, *, rngs: nnx.Rngs):
        self.linear = nnx.Linear(20, 10, rngs=rngs)
        self.drop = nnx.Dropout(0.1)

    def __call__(self, x, *, rngs):
        return nnx.relu(self.drop(self.linear(x), rngs=rngs))


class ImplicitModel(nnx.Module):  # the implicit-style model of "Implicit Random State"
    def __init__(self, rngs: nnx.Rngs):
        self.linear = nnx.Linear(20, 10, rngs=rngs)
        self.drop = nnx.Dropout(0.1, rngs=rngs)

    def __call__(self, x):
        return nnx.relu(self.drop(self.linear(x)))


def test_first_cell_explicit_model():
    rngs = nnx.Rngs(0)
    model = Model(rngs=rngs)  # pass rngs to initialize parameters
    x = rngs.normal((32, 20))  # convenient jax.random methods
    y = model(x, rngs=rngs)  # pass rngs for dropout masks
    assert y.shape == (32, 10)
    assert int(rngs.default.count.value) == 4  # kernel, bias, normal, dropout mask


def test_rngs_rngstream_and_rngstate(capsys):
    rngs = nnx.Rngs(params=0, dropout=random.key(1))
    nnx.display(rngs)
    shown = capsys.readouterr().out
    assert "tag='params'" in shown and "tag='dropout'" in shown and "RngKey" in shown

    params_key = rngs.params()
    dropout_key = rngs.dropout()
    nnx.display(rngs)
    assert "u32[] 1" in capsys.readouterr().out
    assert isinstance(rngs.params, nnx.RngStream)
    assert issubclass(nnx.RngKey, nnx.RngState) and issubclass(nnx.RngCount, nnx.RngState)
    assert not np.array_equal(random.key_data(params_key), random.key_data(dropout_key))
    assert np.array_equal(random.key_data(rngs.params.key.value), random.key_data(random.key(0)))

    linear = nnx.Linear(20, 10, rngs=rngs)
    assert int(rngs.params.count.value) == 3  # kernel and bias came from `params`
    assert linear.kernel.value.shape == (20, 10)

    dropout = nnx.Dropout(0.5)
    y = dropout(jnp.ones(4), rngs=rngs)
    assert set(np.unique(np.asarray(y))) <= {0.0, 2.0}
    assert int(rngs.dropout.count.value) == 2


def test_default_stream():
    rngs = nnx.Rngs(0, params=1)
    key1 = rngs.params()  # Call params.
    key2 = rngs.dropout()  # Fallback to the default stream.
    key3 = rngs()  # Call the default stream directly.
    nnx.display(rngs)
    assert int(rngs.params.count.value) == 1 and int(rngs.default.count.value) == 2
    assert len({tuple(np.asarray(random.key_data(k))) for k in (key1, key2, key3)}) == 3


def test_jax_random_shorthand_methods():
    rngs = nnx.Rngs(0, params=1)
    # using jax.random
    z1 = jax.random.normal(rngs(), (2, 3))
    z2 = jax.random.bernoulli(rngs.params(), 0.5, (10,))
    # shorthand methods
    s1 = rngs.normal((2, 3))  # generates key from rngs.default
    s2 = rngs.params.bernoulli(0.5, (10,))  # generates key from rngs.params
    assert s1.shape == z1.shape and s2.shape == z2.shape
    again = nnx.Rngs(0, params=1)
    again(), again.params()
    np.testing.assert_array_equal(s1, jax.random.normal(again(), (2, 3)))
    np.testing.assert_array_equal(s2, jax.random.bernoulli(again.params(), 0.5, (10,)))


def test_forking_random_state_shapes():
    dropout_rngs = nnx.Rngs(1)
    forked_rngs = dropout_rngs.fork(split=5)
    print((dropout_rngs, forked_rngs))
    assert dropout_rngs.default.key.value.shape == ()
    assert dropout_rngs.default.count.value.shape == ()
    assert forked_rngs.default.key.value.shape == (5,)
    assert forked_rngs.default.count.value.shape == (5,)


def test_implicit_random_state():
    model = ImplicitModel(nnx.Rngs(params=0, dropout=1))
    y = model(x=jnp.ones((1, 20)))
    assert y.shape == (1, 10)


def test_filtering_random_state(capsys):
    model = ImplicitModel(nnx.Rngs(params=0, dropout=1))

    rng_state = nnx.state(model, nnx.RngState)  # All random states.
    key_state = nnx.state(model, nnx.RngKey)  # Only PRNG keys.
    count_state = nnx.state(model, nnx.RngCount)  # Only counts.
    rng_dropout_state = nnx.state(model, "dropout")  # Only `dropout`.

    nnx.display(rng_dropout_state)
    shown = capsys.readouterr().out
    assert "RngKey" in shown and "RngCount" in shown
    assert set(rng_state.flat_state()) == {("drop", "rngs", "key"), ("drop", "rngs", "count")}
    assert set(key_state.flat_state()) == {("drop", "rngs", "key")}
    assert set(count_state.flat_state()) == {("drop", "rngs", "count")}
    assert set(rng_dropout_state.flat_state()) == set(rng_state.flat_state())


def test_reseeding():
    model = ImplicitModel(nnx.Rngs(params=0, dropout=1))
    x = jnp.ones((1, 20))

    y1 = model(x)
    y2 = model(x)

    nnx.reseed(model, dropout=1)  # reset dropout RngState
    y3 = model(x)

    assert not jnp.allclose(y1, y2)  # different
    assert jnp.allclose(y1, y3)  # same


def test_rnn_cell_construction():
    class Count(nnx.Variable):
        pass

    class RNNCell(nnx.Module):
        def __init__(self, din, dout, rngs):
            self.linear = nnx.Linear(dout + din, dout, rngs=rngs)
            self.drop = nnx.Dropout(0.1, rngs=rngs, rng_collection="recurrent_dropout")
            self.dout = dout
            self.count = Count(jnp.array(0, jnp.uint32))

        def __call__(self, h, x) -> tuple[jax.Array, jax.Array]:
            h = self.drop(h)  # Recurrent dropout.
            y = nnx.relu(self.linear(jnp.concatenate([h, x], axis=-1)))
            self.count.value += 1
            return y, y

        def initial_state(self, batch_size: int):
            return jnp.zeros((batch_size, self.dout))

    cell = RNNCell(8, 16, nnx.Rngs(params=0, recurrent_dropout=1))
    h, y = cell(cell.initial_state(4), jnp.ones((4, 8)))
    assert h.shape == y.shape == (4, 16) and int(cell.count.value) == 1
    assert set(nnx.state(cell, "recurrent_dropout").flat_state()) == {
        ("drop", "rngs", "key"),
        ("drop", "rngs", "count"),
    }
