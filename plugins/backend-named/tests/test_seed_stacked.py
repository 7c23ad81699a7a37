"""Seed 003's Transformer example: a `Stacked` of Equinox blocks holding NamedArrays,
built with `Stacked.init(Layers, TransformerBlock)(config, scale=..., key=...)`."""

import dataclasses
import math

import jax
import numpy as np
import pytest

import bryo_named as hax
from bryo_named import Axis, NamedArray
from bryo_scan import BlockFoldable, BlockSeq, ScanCheckpointPolicy, Stacked

eqx = pytest.importorskip("equinox")

Layers = Axis("Layers", 3)


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    Pos: Axis
    Hidden: Axis
    Head: Axis
    Mlp: Axis


class LayerNorm(eqx.Module):
    weight: NamedArray
    axis: Axis = eqx.field(static=True)

    @staticmethod
    def init(axis):
        return LayerNorm(hax.ones(axis), axis)

    def __call__(self, x):
        centred = x - x.mean(self.axis)
        return centred * hax.rsqrt(centred.var(self.axis) + 1e-5) * self.weight


class Attention(eqx.Module):
    wq: NamedArray
    wk: NamedArray
    wv: NamedArray
    wo: NamedArray
    config: TransformerConfig = eqx.field(static=True)

    @staticmethod
    def init(config, *, key):
        c = config
        kq, kk, kv, ko = jax.random.split(key, 4)
        proj = lambda k, a, b: hax.random.normal(k, (a, b)) / math.sqrt(a.size)
        return Attention(
            proj(kq, c.Hidden, c.Head),
            proj(kk, c.Hidden, c.Head),
            proj(kv, c.Hidden, c.Head),
            proj(ko, c.Head, c.Hidden),
            config,
        )

    def __call__(self, x):
        c = self.config
        q = hax.dot(x, self.wq, axis=c.Hidden)
        k = hax.dot(x, self.wk, axis=c.Hidden).rename({"Pos": "KPos"})
        v = hax.dot(x, self.wv, axis=c.Hidden).rename({"Pos": "KPos"})
        weights = hax.softmax(hax.dot(q, k, axis=c.Head) / math.sqrt(c.Head.size), "KPos")
        return hax.dot(hax.dot(weights, v, axis="KPos"), self.wo, axis=c.Head)


class MLP(eqx.Module):
    w_in: NamedArray
    w_out: NamedArray

    @staticmethod
    def init(config, *, key):
        k1, k2 = jax.random.split(key)
        return MLP(
            hax.random.normal(k1, (config.Hidden, config.Mlp)) * 0.3,
            hax.random.normal(k2, (config.Mlp, config.Hidden)) * 0.3,
        )

    def __call__(self, x):
        return hax.dot(hax.gelu(hax.dot(x, self.w_in, axis="Hidden")), self.w_out, axis="Mlp")


class TransformerBlock(eqx.Module):
    attention: Attention
    mlp: MLP
    ln1: LayerNorm
    ln2: LayerNorm
    scale: NamedArray

    def __init__(self, config: TransformerConfig, *, scale, key):
        attn_key, mlp_key = jax.random.split(key)
        self.attention = Attention.init(config, key=attn_key)
        self.mlp = MLP.init(config, key=mlp_key)
        self.ln1 = LayerNorm.init(config.Hidden)
        self.ln2 = LayerNorm.init(config.Hidden)
        self.scale = scale

    def __call__(self, x):
        y = self.attention(self.ln1(x))
        x = x + y
        y = self.mlp(self.ln2(x))
        # the seed's scale is `hax.arange(Layers)` (int32): cast it before it meets floats
        return x + y * (1 + self.scale).astype(y.dtype) / 4


class Transformer(eqx.Module):
    blocks: Stacked

    def __init__(self, config: TransformerConfig, *, key, remat=True):
        self.blocks = Stacked.init(Layers, TransformerBlock, remat=remat)(
            config,  # static configuration
            scale=hax.arange(Layers),  # dynamic: each layer gets a scalar scale 0, 1, 2
            key=jax.random.split(key, Layers),  # dynamic: one key per layer
        )

    def __call__(self, x: NamedArray) -> NamedArray:
        return self.blocks.fold(x)


CONFIG = TransformerConfig(Axis("Pos", 4), Axis("Hidden", 8), Axis("Head", 8), Axis("Mlp", 16))


@pytest.fixture(scope="module")
def model():
    # one compiled construction instead of dozens of eagerly compiled ops
    return eqx.filter_jit(lambda key: Transformer(CONFIG, key=key))(jax.random.key(0))


@pytest.fixture(scope="module")
def x():
    return hax.random.normal(jax.random.key(1), (CONFIG.Pos, CONFIG.Hidden))


def _loop(model, x):
    for block in model.blocks.unstacked():
        x = block(x)
    return x


@pytest.mark.slow
def test_stacked_layout(model):
    stacked = model.blocks.stacked
    assert stacked.scale.axes == (Layers,)
    assert stacked.scale.array.tolist() == [0, 1, 2]
    assert stacked.attention.wq.axes == (Layers, CONFIG.Hidden, CONFIG.Head)
    assert stacked.ln1.axis == CONFIG.Hidden
    layer = model.blocks.get_layer(1)
    assert isinstance(layer, TransformerBlock) and layer.scale.axes == () and int(layer.scale) == 1
    assert layer.mlp.w_in.axes == (CONFIG.Hidden, CONFIG.Mlp)
    assert isinstance(model.blocks, BlockFoldable) and len(list(model.blocks)) == 3
    # every layer got its own key
    assert not np.allclose(model.blocks.get_layer(0).mlp.w_in.array, layer.mlp.w_in.array)


@pytest.mark.slow
def test_fold_equals_loop_and_blockseq(model, x):
    out = jax.jit(lambda m, x: m(x))(model, x)
    assert out.axes == (CONFIG.Pos, CONFIG.Hidden)
    np.testing.assert_allclose(
        out.array, eqx.filter_jit(_loop)(model, x).array, rtol=1e-5, atol=1e-5
    )
    seq = BlockSeq(model.blocks.unstacked(), Layers, model.blocks.gradient_checkpointing)
    np.testing.assert_allclose(
        eqx.filter_jit(BlockSeq.fold)(seq, x).array, out.array, rtol=1e-5, atol=1e-5
    )


@pytest.mark.slow
def test_blockseq_init_builds_the_same_layers(model, x):
    keys = jax.random.split(jax.random.key(0), Layers)
    seq = eqx.filter_jit(
        lambda k: BlockSeq.init(Layers, TransformerBlock)(CONFIG, scale=hax.arange(Layers), key=k)
    )(keys)
    for a, b in zip(
        jax.tree_util.tree_leaves(seq.unstacked()),
        jax.tree_util.tree_leaves(model.blocks.unstacked()),
        strict=True,
    ):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize(
    "remat",
    [
        pytest.param(False, marks=pytest.mark.slow),
        True,
        pytest.param("nested", marks=pytest.mark.slow),
    ],
)
def test_gradients_equal_loop(remat, model, x):
    blocks = Stacked(model.blocks.stacked, Layers, ScanCheckpointPolicy.from_remat(remat))
    model = eqx.tree_at(lambda m: m.blocks, model, blocks)
    loss = lambda m, x: (m(x) ** 2).mean().array
    grads = eqx.filter_jit(eqx.filter_grad(loss))(model, x)
    want = eqx.filter_jit(eqx.filter_grad(lambda m, x: (_loop(m, x) ** 2).mean().array))(model, x)
    for g, w in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)
    assert grads.blocks.stacked.attention.wq.axes == (Layers, CONFIG.Hidden, CONFIG.Head)


@pytest.mark.slow
def test_vmap_applies_every_block_to_the_same_input(model, x):
    y = eqx.filter_jit(Stacked.vmap)(model.blocks, x)
    assert y.axes == (Layers, CONFIG.Pos, CONFIG.Hidden)
    np.testing.assert_allclose(
        y["Layers", 2].array,
        eqx.filter_jit(lambda m, x: m.blocks.get_layer(2)(x))(model, x).array,
        rtol=1e-5,
        atol=1e-5,
    )
