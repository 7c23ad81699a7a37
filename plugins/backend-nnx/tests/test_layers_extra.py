"""Layer invariants: split/merge round trips of random sizes, re-exported functions, display."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bryo_graph as graph
import bryo_nnx
from bryo_nnx import Dropout, Linear, Module, display, initializers
from bryo_rngs import Rngs


class Stack(Module):
    def __init__(self, sizes: list[int], rngs: Rngs) -> None:
        self.layers = graph.List([Linear(a, b, rngs=rngs) for a, b in itertools.pairwise(sizes)])
        self.drop = Dropout(0.5, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.layers:
            x = layer(x)
        return self.drop(x)


@pytest.mark.slow
@settings(max_examples=8, deadline=None)
@given(sizes=st.lists(st.integers(1, 4), min_size=2, max_size=4), seed=st.integers(0, 2**16))
def test_split_merge_round_trip_gives_the_same_outputs_and_keys(sizes, seed):
    model = Stack(sizes, Rngs(seed))
    clone = graph.merge(*graph.split(model), copy=True)
    x = jnp.ones((2, sizes[0]))
    np.testing.assert_array_equal(clone(x), model(x))  # same params, same dropout key
    assert int(clone.drop.rngs.count.value) == int(model.drop.rngs.count.value) == 1
    assert graph.graphdef(clone) == graph.graphdef(model)


def test_activations_are_jax_nn_function_objects():
    for name in ("relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "log_softmax", "elu"):
        assert getattr(bryo_nnx, name) is getattr(jax.nn, name)
    assert bryo_nnx.leaky_relu is jax.nn.leaky_relu
    grad = jax.grad(lambda x: bryo_nnx.relu(x))(0.0)  # relu's custom JVP: 0 at 0
    assert float(grad) == 0.0


def test_initializers_are_jax_nn_initializers_with_flax_spellings():
    assert initializers.lecun_normal is jax.nn.initializers.lecun_normal
    assert initializers.zeros_init() is jax.nn.initializers.zeros
    ones = initializers.ones_init()(jax.random.key(0), (2,), jnp.float32)
    np.testing.assert_array_equal(ones, np.ones(2))


def test_display_prints_modules_states_and_rngs(capsys):
    model = Stack([2, 3], Rngs(0))
    display(model, graph.state(model), Rngs(params=1))
    out = capsys.readouterr().out
    assert out.startswith(  # the text repr(model) gives: statistics, one attribute per line
        "Stack( # RngState: 2 (12 B), Param: 9 (36 B), Total: 11 (48 B)\n"
        "  layers=List([\n"
        "    Linear( # Param: 9 (36 B)\n"
        "      kernel=Param( # 6 (24 B)\n"
        "        value=f32[2,3]\n"
        "      ),\n"
    )
    assert out.count(repr(model)) == 1
    assert repr(graph.state(model)) in out  # States print as their repr
    assert "        value=u32[] 0,\n        tag='dropout'\n" in out  # the Dropout's count
    assert "Rngs( # RngState: 2 (12 B)\n  params=RngStream( # RngState: 2 (12 B)\n" in out
