"""An Equinox MLP and a small Equinox transformer (seed 003's `TransformerBlock(eqx.Module)`)
through bryo: split/merge, filters, jit and grad, and `Stacked`, against plain Equinox."""

from __future__ import annotations

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bryo_transforms
from bryo_equinox import filter_spec
from bryo_filters import PathContains
from bryo_graph import Param, merge, split, state
from bryo_scan import AxisInfo, Stacked

LAYERS = AxisInfo(name=None, size=2, position=0)  # a sized positional layers axis


@dataclasses.dataclass(frozen=True)
class Config:
    hidden: int = 8
    heads: int = 2
    mlp: int = 16


class MLP(eqx.Module):
    up: eqx.nn.Linear
    down: eqx.nn.Linear

    def __init__(self, config: Config, *, key: jax.Array):
        up_key, down_key = jax.random.split(key)
        self.up = eqx.nn.Linear(config.hidden, config.mlp, key=up_key)
        self.down = eqx.nn.Linear(config.mlp, config.hidden, key=down_key)

    def __call__(self, x: jax.Array) -> jax.Array:
        return jax.vmap(lambda v: self.down(jax.nn.gelu(self.up(v))))(x)


class TransformerBlock(eqx.Module):
    attention: eqx.nn.MultiheadAttention
    mlp: MLP
    ln1: eqx.nn.LayerNorm
    ln2: eqx.nn.LayerNorm
    scale: jax.Array

    def __init__(self, config: Config, scale: jax.Array, *, key: jax.Array):
        attn_key, mlp_key = jax.random.split(key)
        self.attention = eqx.nn.MultiheadAttention(config.heads, config.hidden, key=attn_key)
        self.mlp = MLP(config, key=mlp_key)
        self.ln1 = eqx.nn.LayerNorm(config.hidden)
        self.ln2 = eqx.nn.LayerNorm(config.hidden)
        self.scale = scale

    def __call__(self, x: jax.Array) -> jax.Array:
        h = jax.vmap(self.ln1)(x)
        x = x + self.attention(h, h, h)
        return x + self.scale * self.mlp(jax.vmap(self.ln2)(x))


class Transformer(eqx.Module):
    blocks: Stacked

    def __init__(self, config: Config, *, key: jax.Array):
        self.blocks = Stacked.init(LAYERS, TransformerBlock)(
            config, scale=jnp.arange(1.0, 3.0), key=jax.random.split(key, LAYERS.size)
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.blocks.fold(x)


CONFIG = Config()
KEY = jax.random.key(0)
X = jax.random.normal(jax.random.key(1), (4, CONFIG.hidden))
TRANSFORMER = Transformer(CONFIG, key=KEY)
EQX_MLP = eqx.nn.MLP(CONFIG.hidden, 2, 16, 2, key=KEY)


def unrolled(x: jax.Array) -> jax.Array:
    """The same blocks built one by one with plain Equinox, applied in a Python loop."""
    keys = jax.random.split(KEY, LAYERS.size)
    for i in range(LAYERS.size):
        x = TransformerBlock(CONFIG, jnp.asarray(i + 1.0), key=keys[i])(x)
    return x


@eqx.filter_jit
def eqx_forward(model, x):
    return model(x)


@functools.partial(jax.jit, static_argnums=0)
def merged_forward(graphdef, state, x):
    return merge(graphdef, state)(x)


def same_leaves(a, b) -> bool:
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    return ta == tb and all(x is y or np.array_equal(x, y) for x, y in zip(la, lb, strict=True))


def test_stacked_equinox_blocks_match_the_unrolled_loop():
    expected = jax.jit(unrolled)(X)
    np.testing.assert_allclose(eqx_forward(TRANSFORMER, X), expected, rtol=1e-5, atol=1e-5)
    block = TRANSFORMER.blocks.get_layer(1)
    assert isinstance(block, TransformerBlock) and block.scale == 2.0


def test_transformer_split_paths_go_through_the_stack():
    flat = state(TRANSFORMER).flat_state()
    path = ("blocks", "stacked", "attention", "query_proj", "weight")
    assert path in flat and flat[path].type is Param
    assert flat[path].value.shape[0] == LAYERS.size  # the layers axis in front
    assert len(flat) == len(jax.tree_util.tree_leaves(eqx.filter(TRANSFORMER, eqx.is_array)))


@pytest.mark.parametrize("model", [TRANSFORMER, EQX_MLP], ids=["transformer", "mlp"])
def test_split_merge_and_jit_match_equinox(model):
    x = X if model is TRANSFORMER else X[0]
    graphdef, params, rest = split(model, eqx.is_inexact_array, ...)
    assert not rest.flat_state()
    assert same_leaves(merge(graphdef, params, rest), model)
    np.testing.assert_allclose(
        merged_forward(graphdef, params, x), eqx_forward(model, x), rtol=1e-6, atol=1e-6
    )


def test_filters_split_the_transformer_like_equinox_partition():
    graphdef, mlp, others = split(TRANSFORMER, PathContains("mlp"), ...)
    assert {p[3] for p in mlp.flat_state()} == {"up", "down"}
    theirs, _ = eqx.partition(TRANSFORMER, filter_spec(TRANSFORMER, PathContains("mlp")))
    assert [v.value for v in mlp.flat_state().values()] == jax.tree_util.tree_leaves(theirs)
    assert same_leaves(merge(graphdef, mlp, others), TRANSFORMER)


@pytest.mark.slow
def test_grads_through_merge_equal_filter_grad():
    graphdef, params = split(TRANSFORMER, Param)

    def loss(model):
        return jnp.sum(model(X) ** 2)

    ours = jax.jit(jax.grad(lambda p: loss(merge(graphdef, p))))(params)
    theirs = eqx.filter_jit(eqx.filter_grad(loss))(TRANSFORMER)
    # paired by path: a State out of a JAX transform comes in sorted path order
    expected = split(theirs, Param)[1].flat_state()
    got = ours.flat_state()
    assert set(got) == set(expected)
    for path, leaf in got.items():
        np.testing.assert_allclose(leaf.value, expected[path].value, rtol=1e-5, atol=1e-6)


def test_rngs_feed_equinox_constructors():
    bryo_rngs = pytest.importorskip("bryo_rngs")
    rngs = bryo_rngs.Rngs(params=0)
    first = eqx.nn.Linear(3, 4, key=rngs.params())
    second = eqx.nn.Linear(3, 4, key=rngs.params())
    assert not np.array_equal(first.weight, second.weight)
    again = bryo_rngs.Rngs(params=0)
    np.testing.assert_array_equal(eqx.nn.Linear(3, 4, key=again.params()).weight, first.weight)
    mlp = eqx.nn.MLP(2, 2, 3, 1, key=bryo_rngs.Rngs(0).params())
    assert len(split(mlp)[1].flat_state()) == 4


def test_bryo_jit_takes_equinox_models():
    forward = bryo_transforms.jit(lambda model, x: model(x))
    np.testing.assert_allclose(forward(EQX_MLP, X[0]), eqx_forward(EQX_MLP, X[0]), rtol=1e-6)
    np.testing.assert_allclose(forward(TRANSFORMER, X), eqx_forward(TRANSFORMER, X), rtol=1e-6)
