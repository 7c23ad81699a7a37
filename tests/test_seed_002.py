"""Seed 002 (Flax NNX randomness), every code cell, on bryo: `from bryo import nnx`.

The seed's `random` is `jax.random`. Cells that build on earlier ones share a test; the
checks are the seed's own (its `assert`s, shapes and counts) plus what it states in prose:
five different dropout masks from the forked vmap, one recurrent-dropout mask for all
steps of the scan, and twenty counted calls.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import random

from bryo import nnx


class ExplicitModel(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs):
        self.linear = nnx.Linear(20, 10, rngs=rngs)
        self.drop = nnx.Dropout(0.1)

    def __call__(self, x, *, rngs):
        return nnx.relu(self.drop(self.linear(x), rngs=rngs))


class ImplicitModel(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.linear = nnx.Linear(20, 10, rngs=rngs)
        self.drop = nnx.Dropout(0.1, rngs=rngs)

    def __call__(self, x):
        return nnx.relu(self.drop(self.linear(x)))


def test_intro_cell_explicit_rngs() -> None:
    rngs = nnx.Rngs(0)
    model = ExplicitModel(rngs=rngs)
    x = rngs.normal((32, 20))
    y = model(x, rngs=rngs)
    assert x.shape == (32, 20) and y.shape == (32, 10)


def test_rngs_streams_keys_and_counts() -> None:
    rngs = nnx.Rngs(params=0, dropout=random.key(1))
    nnx.display(rngs)
    assert rngs.params.key.tag == "params" and rngs.dropout.count.tag == "dropout"
    params_key = rngs.params()
    dropout_key = rngs.dropout()
    nnx.display(rngs)
    assert int(rngs.params.count.value) == 1 and int(rngs.dropout.count.value) == 1
    assert not jnp.array_equal(random.key_data(params_key), random.key_data(dropout_key))
    key_before = rngs.params.key.value
    rngs.params()
    assert rngs.params.key.value is key_before  # drawing never changes the key

    linear = nnx.Linear(20, 10, rngs=rngs)
    assert linear.kernel.value.shape == (20, 10)
    dropout = nnx.Dropout(0.5)
    out = dropout(jnp.ones(4), rngs=rngs)
    assert set(np.unique(np.asarray(out))) <= {0.0, 2.0}


def test_default_stream_and_shorthand_methods() -> None:
    rngs = nnx.Rngs(0, params=1)
    key1 = rngs.params()
    key2 = rngs.dropout()  # falls back to the default stream
    key3 = rngs()
    nnx.display(rngs)
    assert int(rngs.params.count.value) == 1 and int(rngs.default.count.value) == 2
    assert not jnp.array_equal(random.key_data(key2), random.key_data(key3))
    del key1

    rngs = nnx.Rngs(0, params=1)
    z1 = jax.random.normal(rngs(), (2, 3))
    z2 = jax.random.bernoulli(rngs.params(), 0.5, (10,))
    z1 = rngs.normal((2, 3))
    z2 = rngs.params.bernoulli(0.5, (10,))
    assert z1.shape == (2, 3) and z2.shape == (10,)


def test_forking_explicit_rngs_through_vmap() -> None:
    class Model(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            self.linear = nnx.Linear(20, 10, rngs=rngs)
            self.drop = nnx.Dropout(0.1)

        def __call__(self, x, rngs):
            return nnx.relu(self.drop(self.linear(x), rngs=rngs))

    model = Model(rngs=nnx.Rngs(0))

    @nnx.vmap(in_axes=(None, 0, 0), out_axes=0)
    def model_forward(model, x, rngs):
        return model(x, rngs=rngs)

    dropout_rngs = nnx.Rngs(1)
    # Flax NNX 0.12 deprecates `fork(split=...)` (use `split`): it warns, as Flax does
    with pytest.warns(DeprecationWarning, match="'split' argument of 'fork'"):
        forked_rngs = dropout_rngs.fork(split=5)
    (dropout_rngs, forked_rngs)  # noqa: B018 (the seed displays them)
    assert dropout_rngs.default.key.value.shape == ()
    assert forked_rngs.default.key.value.shape == (5,)
    assert forked_rngs.default.count.value.shape == (5,)

    out = model_forward(model, jnp.ones((5, 20)), forked_rngs)
    assert out.shape == (5, 10)
    np.testing.assert_array_equal(forked_rngs.default.count.value, [1] * 5)
    zeros = np.asarray(out == 0)
    assert len({row.tobytes() for row in zeros}) > 1  # not one mask for the whole batch


def test_implicit_random_state() -> None:
    model = ImplicitModel(nnx.Rngs(params=0, dropout=1))
    y = model(x=jnp.ones((1, 20)))
    assert y.shape == (1, 10)


def test_filtering_random_state() -> None:
    model = ImplicitModel(nnx.Rngs(params=0, dropout=1))
    rng_state = nnx.state(model, nnx.RngState)
    key_state = nnx.state(model, nnx.RngKey)
    count_state = nnx.state(model, nnx.RngCount)
    rng_dropout_state = nnx.state(model, "dropout")
    nnx.display(rng_dropout_state)
    assert len(rng_state.flat_state()) == 2 * len(key_state.flat_state())
    assert len(key_state.flat_state()) == len(count_state.flat_state()) >= 1
    assert all(leaf.tag == "dropout" for leaf in rng_dropout_state.flat_state().values())


def test_reseeding() -> None:
    model = ImplicitModel(nnx.Rngs(params=0, dropout=1))
    x = jnp.ones((1, 20))

    y1 = model(x)
    y2 = model(x)

    nnx.reseed(model, dropout=1)  # reset dropout RngState
    y3 = model(x)

    assert not jnp.allclose(y1, y2)  # different
    assert jnp.allclose(y1, y3)  # same


def test_forking_implicit_random_state() -> None:
    model = ImplicitModel(nnx.Rngs(params=0, dropout=1))
    x = jnp.ones((1, 20))
    rng_axes = nnx.StateAxes({"dropout": 0, ...: None})

    @nnx.fork_rngs(split={"dropout": 5})
    @nnx.vmap(in_axes=(rng_axes, None), out_axes=0)
    def sample_from_model(model, x):
        return model(x)

    samples = sample_from_model(model, x)
    print(samples.shape)
    assert samples.shape == (5, 1, 10)
    masks = {np.asarray(sample == 0).tobytes() for sample in samples}
    assert len(masks) == 5  # five different dropout masks
    again = sample_from_model(model, x)
    assert not jnp.allclose(samples, again)  # and new ones on the next call
    streams = [s for _, s in nnx.iter_graph(model) if isinstance(s, nnx.RngStream)]
    assert all(stream.key.value.shape == () for stream in streams)  # restored after the call


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


@nnx.jit
def rnn_forward(cell: RNNCell, x: jax.Array):
    h = cell.initial_state(batch_size=x.shape[0])

    # Broadcast the 'recurrent_dropout' PRNG state to have the same mask on every step.
    state_axes = nnx.StateAxes({"recurrent_dropout": None, ...: nnx.Carry})

    @nnx.scan(in_axes=(state_axes, nnx.Carry, 1), out_axes=(nnx.Carry, 1))
    def unroll(cell: RNNCell, h, x) -> tuple[jax.Array, jax.Array]:
        h, y = cell(h, x)
        return h, y

    h, y = unroll(cell, h, x)
    return y


def test_recurrent_dropout_scan() -> None:
    cell = RNNCell(8, 16, nnx.Rngs(params=0, recurrent_dropout=1))
    x = jnp.ones((4, 20, 8))
    y = rnn_forward(cell, x)
    print(f"{y.shape = }")
    print(f"{cell.count.value = }")
    assert y.shape == (4, 20, 16)
    assert int(cell.count.value) == 20


def test_recurrent_dropout_uses_one_mask_for_all_steps() -> None:
    masks = []

    class Spy(RNNCell):
        def __call__(self, h, x):
            dropped = self.drop(jnp.ones_like(h))
            masks.append(dropped == 0)
            return super().__call__(h, x)

    cell = Spy(8, 16, nnx.Rngs(params=0, recurrent_dropout=1))
    cell.drop.rate = 0.5
    unroll = nnx.scan(
        lambda cell, h, x: (lambda out: (out[0], (out[1], masks[-1])))(cell(h, x)),
        in_axes=(nnx.StateAxes({"recurrent_dropout": None, ...: nnx.Carry}), nnx.Carry, 1),
        out_axes=(nnx.Carry, 1),
    )
    _, (_, step_masks) = unroll(cell, cell.initial_state(4), jnp.ones((4, 20, 8)))
    assert step_masks.shape == (4, 20, 16)
    first = step_masks[:, 0]
    assert bool(first.any()) and bool((~first).any())
    assert all(bool(jnp.array_equal(first, step_masks[:, t])) for t in range(20))
    assert int(cell.count.value) == 20
