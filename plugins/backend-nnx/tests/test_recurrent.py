"""Recurrent cells and `RNN`/`Bidirectional`: a scan equals a Python loop over the cell,
reversal keeps padding in place, `seq_lengths` picks each sequence's last carry, the
cell's state is threaded through the steps and written back, and bad arguments are named."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bryo_graph as graph
from bryo_graph import BatchStat, Param
from bryo_nnx import (
    RNN,
    BatchNorm,
    Bidirectional,
    GRUCell,
    LSTMCell,
    OptimizedLSTMCell,
    RNNCellBase,
    SimpleCell,
    flip_sequences,
    initializers,
)
from bryo_rngs import Rngs
from bryo_transforms import Carry

X = jax.random.normal(jax.random.key(0), (2, 4, 3))


close = functools.partial(np.testing.assert_allclose, atol=1e-5, rtol=1e-5)


def unrolled(cell, carry, xs):
    outputs = []
    for t in range(xs.shape[1]):
        carry, y = cell(carry, xs[:, t])
        outputs.append(y)
    return carry, jnp.stack(outputs, axis=1)


@pytest.mark.parametrize("cell_type", [SimpleCell, GRUCell, LSTMCell, OptimizedLSTMCell])
def test_rnn_equals_a_python_loop_over_the_cell(cell_type):
    cell = cell_type(3, 5, rngs=Rngs(0))
    carry = cell.initialize_carry(X[:, 0].shape, Rngs(carry=0), initializers.normal())
    expected_carry, expected = unrolled(cell, carry, X)
    got_carry, got = RNN(cell, return_carry=True)(X, initial_carry=carry)
    close(got, expected)
    jax.tree.map(close, got_carry, expected_carry)


def test_lstm_carry_is_c_and_h_and_optimized_lstm_takes_its_parameters():
    lstm = LSTMCell(3, 4, rngs=Rngs(0))
    c, h = lstm.initialize_carry((2, 3), Rngs(0))
    assert c.shape == h.shape == (2, 4)
    fast = OptimizedLSTMCell(3, 4, rngs=Rngs(1))
    gates = ("i", "f", "g", "o")
    fast.dense_i.kernel[...] = jnp.concatenate(
        [getattr(lstm, f"i{g}" if g != "f" else "if_").kernel[...] for g in gates], axis=-1
    )
    fast.dense_h.kernel[...] = jnp.concatenate(
        [getattr(lstm, f"h{g}").kernel[...] for g in gates], axis=-1
    )
    fast.dense_h.bias[...] = jnp.concatenate([getattr(lstm, f"h{g}").bias[...] for g in gates])
    carry = (jnp.ones((2, 4)), jnp.zeros((2, 4)))
    jax.tree.map(close, fast(carry, X[:, 0]), lstm(carry, X[:, 0]))


def test_reverse_keeps_padding_at_the_end_and_seq_lengths_pick_the_last_carry():
    cell = GRUCell(3, 4, rngs=Rngs(0))
    lengths = jnp.array([4, 2])
    carry, outputs = RNN(cell, return_carry=True)(X, seq_lengths=lengths)
    _, second = unrolled(cell, jnp.zeros((1, 4)), X[1:, :2])
    close(carry[1], second[0, -1])
    close(outputs[1, :2], second[0])
    back = RNN(cell, reverse=True, keep_order=True)(X, seq_lengths=lengths)
    _, expected = unrolled(cell, jnp.zeros((1, 4)), X[1:, 1::-1])
    close(back[1, :2], expected[0, ::-1])


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    time_major=st.booleans(),
)
def test_flipping_twice_gives_the_sequences_back(lengths, time_major):
    x = jnp.arange(len(lengths) * 5 * 2).reshape(len(lengths), 5, 2)
    if time_major:
        x = jnp.swapaxes(x, 0, 1)
    seq = jnp.array(lengths)
    once = flip_sequences(x, seq, num_batch_dims=1, time_major=time_major)
    np.testing.assert_array_equal(flip_sequences(once, seq, 1, time_major), x)
    first = once[0] if time_major else once[:, 0]
    last_valid = (
        x[seq - 1, jnp.arange(len(lengths))] if time_major else x[jnp.arange(len(lengths)), seq - 1]
    )
    np.testing.assert_array_equal(first, last_valid)


class NormedCell(RNNCellBase):
    """A cell with a BatchNorm inside: its statistics must move on at every step."""

    def __init__(self, rngs):
        self.cell = SimpleCell(3, 4, rngs=rngs)
        self.norm = BatchNorm(4, rngs=rngs)
        self.hidden_features = 4
        self.param_dtype = jnp.float32
        self.carry_init = None
        self.rngs = None

    def __call__(self, carry, x):
        carry, y = self.cell(carry, x)
        return carry, self.norm(y)


def test_the_cells_state_is_threaded_through_the_steps_and_written_back():
    looped, scanned = NormedCell(Rngs(0)), NormedCell(Rngs(0))
    _, expected = unrolled(looped, jnp.zeros((2, 4)), X)
    got = RNN(scanned)(X, rngs=Rngs(carry=0))
    close(got, expected)
    close(scanned.norm.mean[...], looped.norm.mean[...])
    frozen = NormedCell(Rngs(0))
    RNN(frozen, state_axes={BatchStat: None, ...: Carry})(X)
    close(frozen.norm.mean[...], jnp.zeros(4))


def test_rnn_runs_under_jit_and_grad():
    rnn = RNN(LSTMCell(3, 4, rngs=Rngs(0)))
    graphdef, params, rest = graph.split(rnn, Param, ...)

    @jax.jit
    def loss(params, x):
        # copy=True: `rest` holds rnn's own Variables (Flax 0.12), which must not see tracers
        return jnp.sum(graph.merge(graphdef, params, rest, copy=True)(x) ** 2)

    grads = jax.grad(loss)(params, X)
    assert set(dict(grads.flat_state())) == set(dict(params.flat_state()))
    close(loss(params, X), jnp.sum(rnn(X) ** 2))


def test_bidirectional_concatenates_both_directions():
    forward, backward = RNN(GRUCell(3, 4, rngs=Rngs(0))), RNN(GRUCell(3, 2, rngs=Rngs(1)))
    out = Bidirectional(forward, backward)(X)
    assert out.shape == (2, 4, 6)
    close(out[..., :4], forward(X))
    close(out[..., 4:], backward(X, reverse=True, keep_order=True))


def test_recurrent_argument_errors():
    cell = SimpleCell(3, 4, rngs=Rngs(0))
    with pytest.raises(ValueError, match=r"`state_axes` maps .* to 0; a cell's state is either"):
        RNN(cell, state_axes={...: 0})(X)
    with pytest.raises(ValueError, match="initialize_carry needs random keys"):
        RNN(cell, rngs=False)(X)
    with pytest.raises(TypeError, match="`rngs` of RNN must be True"):
        RNN(cell, rngs=3)
    with pytest.raises(ValueError, match=r"RNN expects inputs of shape \(\*batch, time"):
        RNN(cell)(jnp.ones(3))
    kept = SimpleCell(3, 4, keep_rngs=True, rngs=Rngs(0, carry=1))
    assert kept.initialize_carry((2, 3)).shape == (2, 4)
