"""Attention beyond the basics: grouped-query attention, `is_causal`, shape errors that name
the axes, autoregressive decoding with the cache, and sowing the attention weights."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bryo_graph as graph
from bryo_graph import Cache, Intermediate
from bryo_nnx import MultiHeadAttention, dot_product_attention, make_causal_mask
from bryo_rngs import Rngs

KEYS = jax.random.split(jax.random.key(0), 3)
Q = jax.random.normal(KEYS[0], (2, 5, 4, 3))
K = jax.random.normal(KEYS[1], (2, 6, 2, 3))
V = jax.random.normal(KEYS[2], (2, 6, 2, 3))


close = functools.partial(np.testing.assert_allclose, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_grouped_query_attention_shares_each_kv_head_among_its_query_heads():
    repeated = dot_product_attention(Q, jnp.repeat(K, 2, axis=-2), jnp.repeat(V, 2, axis=-2))
    close(dot_product_attention(Q, K, V), repeated)
    # the explicit path (taken with dropout or a `module` to sow into) agrees with the fused one
    close(dot_product_attention(Q, K, V, module=_Sink()), repeated)


class _Sink:
    def sow(self, *args: object) -> bool:
        return True


@pytest.mark.slow
def test_is_causal_equals_a_causal_mask():
    q, k, v = Q, jnp.repeat(K, 2, -2)[:, :5], jnp.repeat(V, 2, -2)[:, :5]
    mask = make_causal_mask(jnp.ones((2, 5)))
    close(dot_product_attention(q, k, v, is_causal=True), dot_product_attention(q, k, v, mask=mask))


@pytest.mark.parametrize(
    ("k_shape", "v_shape", "message"),
    [
        ((6, 2, 3), (6, 2, 3), "same rank"),
        ((3, 6, 2, 3), (3, 6, 2, 3), r"batch dims .* must match"),
        ((2, 6, 2, 3), (2, 7, 2, 3), r"lengths must match \(axis -3\); got 6 and 7"),
        ((2, 6, 2, 2), (2, 6, 2, 3), r"depths must match \(head_dim, axis -1\); got 3 and 2"),
        ((2, 6, 3, 3), (2, 6, 3, 3), r"query heads \(axis -2: 4\) must be a multiple of the key"),
    ],
)
def test_shape_errors_name_the_axes(k_shape, v_shape, message):
    with pytest.raises(ValueError, match=message):
        dot_product_attention(Q, jnp.ones(k_shape), jnp.ones(v_shape))


@pytest.mark.slow
def test_multi_head_attention_with_fewer_kv_heads():
    mha = MultiHeadAttention(4, 6, qkv_features=8, num_kv_heads=2, rngs=Rngs(0))
    assert mha.key.kernel.shape == (6, 2, 2) and mha.query.kernel.shape == (6, 4, 2)
    assert mha(jnp.ones((1, 3, 6))).shape == (1, 3, 6)
    with pytest.raises(ValueError, match="`num_heads`=4 must be divisible by `num_kv_heads`=3"):
        MultiHeadAttention(4, 6, qkv_features=8, num_kv_heads=3, rngs=Rngs(0))


@pytest.mark.slow
def test_decoding_one_position_at_a_time_equals_a_causal_pass():
    mha = MultiHeadAttention(2, 4, decode=True, rngs=Rngs(0))
    x = jax.random.normal(KEYS[0], (3, 5, 4))
    with pytest.raises(ValueError, match=r"call `layer\.init_cache"):
        mha(x[:, :1])
    mha.init_cache(x.shape)
    assert isinstance(mha.cached_key, Cache) and mha.cached_key.shape == (3, 5, 2, 2)
    steps = jnp.concatenate([mha(x[:, t : t + 1]) for t in range(5)], axis=1)
    assert int(mha.cache_index[...]) == 5
    close(steps, mha(x, decode=False, is_causal=True))
    with pytest.raises(ValueError, match=r"one position at a time: the key is \(3, 2, 2, 2\)"):
        mha(x[:, :2])


@pytest.mark.slow
def test_decoding_steps_under_jit_carry_the_cache():
    mha = MultiHeadAttention(2, 4, decode=True, rngs=Rngs(0))
    x = jax.random.normal(KEYS[1], (1, 4, 4))
    mha.init_cache(x.shape)
    graphdef, state = graph.split(mha)

    @jax.jit
    def step(state, token):
        layer = graph.merge(graphdef, state)
        return layer(token), graph.state(layer)

    outputs = []
    for t in range(4):
        y, state = step(state, x[:, t : t + 1])
        outputs.append(y)
    graph.update(mha, state)
    assert int(mha.cache_index[...]) == 4
    close(jnp.concatenate(outputs, 1), mha(x, decode=False, is_causal=True))


@pytest.mark.slow
def test_sow_weights_keeps_the_attention_weights():
    mha = MultiHeadAttention(2, 4, rngs=Rngs(0))
    x = jax.random.normal(KEYS[2], (1, 3, 4))
    mha(x, sow_weights=True)
    mha(x)
    (weights,) = mha.attention_weights.value  # one per sowing call
    assert isinstance(mha.attention_weights, Intermediate) and weights.shape == (1, 2, 3, 3)
    close(weights.sum(-1), jnp.ones((1, 2, 3)))


def test_decode_defaults_to_off_and_inputs_v_needs_inputs_k():
    mha = MultiHeadAttention(2, 4, rngs=Rngs(0))  # Flax requires `decode`; here None is off
    assert mha(jnp.ones((1, 3, 4))).shape == (1, 3, 4)
    with pytest.raises(ValueError, match="`inputs_v` given without `inputs_k`"):
        mha(jnp.ones((1, 3, 4)), inputs_v=jnp.ones((1, 3, 4)))
