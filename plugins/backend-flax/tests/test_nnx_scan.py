"""Flax NNX blocks in core-scan: `Stacked`, `BlockSeq` and `scan` stack and apply them
through `flax.nnx.split`/`merge`, whether the blocks are pytrees or not."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

bryo_scan = pytest.importorskip("bryo_scan")
from bryo_scan import AxisInfo, BlockSeq, Stacked, scan  # noqa: E402

LAYERS = AxisInfo(name=None, size=3, position=0)
X = jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)
KEYS = jax.random.split(jax.random.key(0), 3)


class Block(nnx.Module):
    def __init__(self, key):
        self.linear = nnx.Linear(4, 4, rngs=nnx.Rngs(key))

    def __call__(self, x):
        return x + jax.nn.tanh(self.linear(x))


class GraphBlock(nnx.Module, pytree=False):
    """Not a pytree: only the block splitter (nnx.split/merge) can stack it."""

    def __init__(self, key):
        self.linear = nnx.Linear(4, 4, rngs=nnx.Rngs(key))
        self.alias = self.linear  # a shared reference, kept shared by nnx.split

    def __call__(self, x):
        return x + jax.nn.tanh(self.alias(x))


def loop(blocks, x):
    for block in blocks:
        x = block(x)
    return x


@pytest.mark.parametrize("Block", [Block, GraphBlock])
def test_stacked_and_block_seq(Block):
    stacked = Stacked.init(LAYERS, Block)(KEYS)
    assert isinstance(stacked.stacked, Block)
    assert stacked.stacked.linear.kernel.shape == (3, 4, 4)
    layers = stacked.unstacked()
    assert [layer.linear.kernel.shape for layer in layers] == [(4, 4)] * 3
    expected = loop([Block(key) for key in KEYS], X)
    np.testing.assert_allclose(stacked.fold(X), expected, rtol=1e-5, atol=1e-6)
    seq = BlockSeq.init(LAYERS, Block)(KEYS)
    np.testing.assert_allclose(seq.fold(X), expected, rtol=1e-5, atol=1e-6)
    carry, _ = scan(lambda c, block: (block(c), None), LAYERS)(X, stacked.stacked)
    np.testing.assert_allclose(carry, expected, rtol=1e-5, atol=1e-6)
    if Block is GraphBlock:
        assert layers[0].alias is layers[0].linear


def test_stacked_pytree_blocks_train_under_jit_and_grad():
    stacked = Stacked.init(LAYERS, Block)(KEYS)
    loss = lambda s: jnp.sum(s.fold(X) ** 2)
    grads = jax.jit(jax.grad(loss))(stacked)
    reference = jax.grad(lambda blocks: jnp.sum(loop(blocks, X) ** 2))(stacked.unstacked())
    stacked_reference = jnp.stack([g.linear.kernel[...] for g in reference])
    np.testing.assert_allclose(
        grads.stacked.linear.kernel[...], stacked_reference, rtol=1e-4, atol=1e-6
    )
