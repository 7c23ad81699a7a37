"""Stacked, BlockSeq and BlockFoldable with plain-pytree blocks and a positional layers axis
given through a test plugin (core-scan alone has no named axes)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_graph import NodeType, Param
from bryo_plugins import hookimpl, stood_in_for
from bryo_pytree import pytree_dataclass, static_field
from bryo_scan import (
    AxisInfo,
    BlockFoldable,
    BlockSeq,
    ScanAxisError,
    ScanOutputError,
    Stacked,
    scan,
    split_graph_block,
)

LAYERS = AxisInfo(name=None, size=4, position=0)  # a sized positional axis


@pytree_dataclass
class Dense:
    w: jax.Array
    b: jax.Array
    scale: jax.Array
    activation: object = static_field(default=jnp.tanh)

    @classmethod
    def make(cls, width, *, key, scale):
        return cls(jax.random.normal(key, (width, width)) * 0.3, jnp.zeros(width), scale)

    def __call__(self, x):
        h = x @ self.w
        return x + self.scale * self.activation(h + jnp.broadcast_to(self.b, h.shape))


@pytree_dataclass
class ScanDense(Dense):
    def __call__(self, x):  # a "scan block": (carry, output)
        y = super().__call__(x)
        return y, y.sum()


def _make(cls, factory=Stacked, remat=True):
    keys = jax.random.split(jax.random.key(0), 4)
    return factory.init(LAYERS, cls.make, remat=remat)(3, key=keys, scale=jnp.arange(4.0) / 4)


def _loop(blocks, x):
    for block in blocks:
        x = block(x)
    return x


def test_init_stacks_every_array():
    stacked = _make(Dense)
    assert stacked.stacked.w.shape == (4, 3, 3)
    assert stacked.stacked.scale.shape == (4,)
    assert stacked.stacked.activation is jnp.tanh
    assert len(stacked) == 4
    layer = stacked.get_layer(2)
    assert layer.w.shape == (3, 3) and float(layer.scale) == 0.5
    np.testing.assert_allclose(stacked.get_layer(-1).w, stacked.stacked.w[3])
    with pytest.raises(IndexError, match="out of range for 4 layers"):
        stacked.get_layer(4)


@pytest.mark.parametrize("remat", [False, True, "nested"])
def test_fold_matches_loop_and_blockseq(remat):
    stacked = _make(Dense, remat=remat)
    x = jnp.linspace(-1.0, 1.0, 3)
    want = _loop(stacked.unstacked(), x)
    np.testing.assert_allclose(stacked.fold(x), want, rtol=1e-6)
    seq = BlockSeq(stacked.unstacked(), LAYERS, stacked.gradient_checkpointing)
    np.testing.assert_allclose(seq.fold(x), want, rtol=1e-6)
    np.testing.assert_allclose(_loop(stacked, x), want, rtol=1e-6)  # iteration


def test_gradients_of_fold_equal_loop():
    stacked = _make(Dense)
    x = jnp.linspace(-1.0, 1.0, 3)
    grad_stacked = jax.jit(jax.grad(lambda s, x: s.fold(x).sum(), argnums=(0, 1)))(stacked, x)
    loop = lambda s, x: _loop(s.unstacked(), x).sum()
    want = jax.grad(loop, argnums=(0, 1))(stacked, x)
    for g, w in zip(
        jax.tree_util.tree_leaves(grad_stacked), jax.tree_util.tree_leaves(want), strict=True
    ):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_scan_vmap_and_via():
    stacked = _make(ScanDense)
    seq = _make(ScanDense, factory=BlockSeq)
    x = jnp.linspace(-1.0, 1.0, 3)
    carry, outs = stacked.scan(x)
    seq_carry, seq_outs = seq.scan(x)
    np.testing.assert_allclose(carry, seq_carry, rtol=1e-6)
    np.testing.assert_allclose(outs, seq_outs, rtol=1e-6)
    assert outs.shape == (4,)
    ys, _ = stacked.vmap(x)
    assert ys.shape == (4, 3)
    np.testing.assert_allclose(ys[1], stacked.get_layer(1)(x)[0], rtol=1e-6)
    np.testing.assert_allclose(seq.vmap(x)[0], ys, rtol=1e-6)
    half = lambda block, carry, factor: block(carry)[0] * factor
    np.testing.assert_allclose(
        stacked.fold_via(half)(x, 0.5), seq.fold_via(half)(x, 0.5), rtol=1e-6
    )
    pair = lambda block, carry: (block(carry)[0], carry.mean())
    for a, b in zip(stacked.scan_via(pair)(x), seq.scan_via(pair)(x), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_both_are_block_foldable_and_pytrees():
    stacked, seq = _make(Dense), _make(Dense, factory=BlockSeq)
    assert isinstance(stacked, BlockFoldable) and isinstance(seq, BlockFoldable)
    assert len(seq) == 4 and seq.get_layer(1).w.shape == (3, 3)
    doubled = jax.tree_util.tree_map(lambda a: a * 2, stacked)
    assert isinstance(doubled, Stacked) and doubled.Block == LAYERS


def test_init_errors():
    with pytest.raises(ScanAxisError, match="has no size"):
        Stacked.init(0, Dense.make)(3, key=jax.random.split(jax.random.key(0), 4), scale=0.1)
    with pytest.raises(ScanAxisError, match=r"`Stacked.init` .* key has leading dimension 3"):
        Stacked.init(LAYERS, Dense.make)(3, key=jax.random.split(jax.random.key(0), 3), scale=0.1)
    with pytest.raises(TypeError, match="not both"):
        Stacked.init(LAYERS, Dense.make, remat=True, gradient_checkpointing=False)


@dataclasses.dataclass
class MutableBlock:
    """A block that is not a pytree (like a graph-style module): needs the splitter hook."""

    weight: jax.Array

    def __call__(self, x):
        return x * self.weight


def test_block_splitter_hook(bryo_plugin_manager):
    class MutableBlocks:
        @hookimpl
        def bryo_scan_block_splitters(self):
            return {MutableBlock: lambda block: (block.weight, MutableBlock)}

    plugin = MutableBlocks()
    bryo_plugin_manager.register(plugin)
    stacked = Stacked.init(LAYERS, MutableBlock)(jnp.arange(1.0, 5.0))
    assert isinstance(stacked.stacked, MutableBlock) and stacked.stacked.weight.shape == (4,)
    assert float(stacked.fold(1.0)) == 24.0
    assert [float(b.weight) for b in stacked.unstacked()] == [1.0, 2.0, 3.0, 4.0]
    # `scan` takes such blocks apart too: each step gets a block of one layer
    carry, ys = scan(lambda c, block: (block(c), block.weight), LAYERS)(1.0, stacked.stacked)
    assert float(carry) == 24.0 and ys.tolist() == [1.0, 2.0, 3.0, 4.0]
    bryo_plugin_manager.unregister(plugin)  # the cached table follows the manager's epoch
    with pytest.raises(TypeError, match="not a pytree"):
        Stacked.init(LAYERS, MutableBlock)(jnp.arange(1.0, 5.0))


def test_unstacked_splits_the_stacked_block_once(bryo_plugin_manager):
    """`unstacked` (and `to_state_dict`, which reads every layer) took the stacked block
    apart once per layer; each layer is still a block of its own."""
    splits = []

    class CountingBlocks:
        @hookimpl
        def bryo_scan_block_splitters(self):
            return {MutableBlock: lambda block: (splits.append(1), (block.weight, MutableBlock))[1]}

    plugin = CountingBlocks()
    bryo_plugin_manager.register(plugin)
    stacked = Stacked.init(LAYERS, MutableBlock)(jnp.arange(1.0, 5.0))
    splits.clear()
    layers = stacked.unstacked()
    assert len(splits) == 1
    assert [float(b.weight) for b in layers] == [1.0, 2.0, 3.0, 4.0]
    layers[0].weight = jnp.asarray(9.0)  # one layer's block is not another's
    assert float(layers[1].weight) == 2.0 and float(stacked.get_layer(0).weight) == 1.0
    bryo_plugin_manager.unregister(plugin)


def test_block_that_is_not_a_pytree_is_an_error():
    with pytest.raises(TypeError, match=r"MutableBlock.*not a pytree.*bryo_scan_block_splitters"):
        Stacked.init(LAYERS, MutableBlock)(jnp.arange(1.0, 5.0))


class TorchLikeBlock:
    """A mutable, torch-like block (parameters in a dict), not a pytree: its backend only
    declares a graph node type."""

    def __init__(self, weight):
        self._parameters = {"weight": weight}

    def __call__(self, x):
        return x * self._parameters["weight"]


def _flatten(node):
    return list(node._parameters.items()), None


def _create(cls, aux):
    node = object.__new__(cls)
    node._parameters = {}
    return node


def _init_key(node, key, child):
    node._parameters[key] = child


class TorchLikeBackend:
    @hookimpl
    def bryo_graph_node_types(self):
        return [
            NodeType(
                TorchLikeBlock,
                flatten=_flatten,
                create=_create,
                init_key=_init_key,
                set_key=_init_key,
                pop_key=lambda node, key: node._parameters.pop(key),
                leaf_type=Param,
            )
        ]


def test_a_graph_node_block_stacks_with_no_splitter_hook(bryo_plugin_manager):
    """A backend declaring its blocks as graph nodes had to write a splitter too (the
    one every graph backend writes: `split` and `merge`), or `Stacked` refused the block
    as "not a pytree"."""
    bryo_plugin_manager.register(TorchLikeBackend(), name="torch-like")
    stacked = Stacked.init(LAYERS, TorchLikeBlock)(jnp.arange(1.0, 5.0))
    assert isinstance(stacked.stacked, TorchLikeBlock)
    assert stacked.stacked._parameters["weight"].shape == (4,)
    assert float(stacked.fold(1.0)) == 24.0
    assert [float(b._parameters["weight"]) for b in stacked.unstacked()] == [1.0, 2.0, 3.0, 4.0]
    carry, ys = scan(lambda c, block: (block(c), block._parameters["weight"]), LAYERS)(
        1.0, stacked.stacked
    )
    assert float(carry) == 24.0 and ys.tolist() == [1.0, 2.0, 3.0, 4.0]
    tree, rebuild = split_graph_block(stacked.stacked)
    assert list(tree.flat_state()) == [("weight",)]
    assert isinstance(rebuild(tree), TorchLikeBlock)


def test_resolve_axis_hook(bryo_plugin_manager):
    @dataclasses.dataclass(frozen=True)
    class Depth:
        size: int

    class DepthAxes:
        @hookimpl
        def bryo_scan_resolve_axis(self, axis):
            return AxisInfo(None, axis.size, 0, axis) if isinstance(axis, Depth) else None

    bryo_plugin_manager.register(DepthAxes())
    stacked = Stacked.init(Depth(2), Dense.make)(
        3, key=jax.random.split(jax.random.key(0), 2), scale=1.0
    )
    assert stacked.stacked.w.shape == (2, 3, 3)


@pytree_dataclass
class Noisy:
    """A block taking a per-layer key, built by Haliax's `init` classmethod convention."""

    w: jax.Array
    built_by: str = static_field(default="constructor")

    @classmethod
    def init(cls, w):
        return cls(w, "init")

    def __call__(self, x, bias=0.0, *, key):
        return x * self.w + jax.random.normal(key, x.shape) + bias


def _noisy(factory):
    return factory.init(LAYERS, Noisy)(jnp.arange(1.0, 5.0))


@pytest.mark.parametrize("factory", [Stacked, BlockSeq])
def test_arguments_with_the_layers_axis_are_split_between_layers(factory):
    blocks = _noisy(factory)
    keys = jax.random.split(jax.random.key(1), 4)
    x, shared_bias, layer_bias = jnp.ones(3), jnp.arange(3.0), jnp.arange(4.0)[:, None]
    want, want_split = x, x
    for i, block in enumerate(_noisy(BlockSeq).unstacked()):
        want = block(want, shared_bias, key=keys[i])
        want_split = block(want_split, layer_bias[i], key=keys[i])
    np.testing.assert_allclose(blocks.fold(x, shared_bias, key=keys), want, rtol=1e-6)
    np.testing.assert_allclose(blocks.fold(x, layer_bias, key=keys), want_split, rtol=1e-6)


def test_stacked_and_blockseq_scan_and_vmap_split_arguments_alike():
    keys = jax.random.split(jax.random.key(2), 4)
    pair = lambda block, carry, *, key: (block(carry, key=key), jax.random.key_data(key))
    x = jnp.ones(3)
    for a, b in zip(
        _noisy(Stacked).scan_via(pair)(x, key=keys),
        _noisy(BlockSeq).scan_via(pair)(x, key=keys),
        strict=True,
    ):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    each = lambda block, x, scale: block.w * x * scale
    out = _noisy(Stacked).vmap_via(each)(x, jnp.arange(4.0))
    np.testing.assert_allclose(out, _noisy(BlockSeq).vmap_via(each)(x, jnp.arange(4.0)))
    np.testing.assert_allclose(out, (jnp.arange(1.0, 5.0) * jnp.arange(4.0))[:, None] * x[None, :])


@pytest.mark.parametrize("factory", [Stacked, BlockSeq])
def test_vmap_gives_every_block_the_whole_input(factory):
    stacked = _make(Dense, factory=factory)
    x = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)  # leading axis of size 4: still not split
    out = stacked.vmap(x)
    assert out.shape == (4, 4, 3)
    np.testing.assert_allclose(out[2], stacked.get_layer(2)(x), rtol=1e-6)


@pytest.mark.parametrize("factory", [Stacked, BlockSeq])
def test_is_scanned_overrides_the_split(factory):
    blocks = _noisy(factory)
    keys = jax.random.split(jax.random.key(3), 4)
    table = jnp.ones((4, 3))  # meant for every layer although it has 4 rows
    step = lambda block, carry, table, *, key: block(carry, key=key) + table.sum(0)
    not_table = lambda leaf: leaf.shape != (4, 3)
    got = blocks.fold_via(step, is_scanned=not_table)(jnp.ones(3), table, key=keys)
    want = jnp.ones(3)
    for i, block in enumerate(_noisy(BlockSeq).unstacked()):
        want = step(block, want, table, key=keys[i])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(ScanAxisError, match=r"table has leading dimension 3 \(array of shape"):
        blocks.fold_via(step, is_scanned=True)(jnp.ones(3), jnp.ones((3, 3)), key=keys)


def test_haliax_init_convention_and_plain_constructors():
    assert _noisy(Stacked).stacked.built_by == "init"
    assert all(block.built_by == "init" for block in _noisy(BlockSeq))

    @pytree_dataclass
    class WithInstanceInit:  # an instance method named `init` (Flax Linen's) does not count
        w: jax.Array

        def init(self, *args):
            raise AssertionError("not a constructor")

    stacked = Stacked.init(LAYERS, WithInstanceInit)(jnp.arange(4.0))
    assert stacked.stacked.w.shape == (4,)


def test_prevent_cse_is_haliax_older_spelling():
    with pytest.warns(DeprecationWarning, match=r"ScanCheckpointPolicy\(prevent_cse=...\)"):
        make = Stacked.init(LAYERS, Noisy, prevent_cse=True)
    assert make(jnp.arange(4.0)).gradient_checkpointing.prevent_cse is True


@pytest.mark.parametrize("factory", [Stacked, BlockSeq])
def test_scan_of_blocks_that_return_no_pair(factory):
    with pytest.raises(ScanOutputError, match=r"the block \(.*\) must return a pair"):
        _make(Dense, factory=factory).scan(jnp.ones(3))


def test_the_block_a_stack_calls_stands_in_for_its_stacked_block():
    """Tools naming calls by their place in the model (`make_mox`) learn which stack a
    rebuilt layer belongs to from `bryo_plugins.standing_in`, in fold, scan and vmap."""
    stacked = _make(Dense, remat=False)
    seen = []

    def record(block, x, *rest):
        seen.append(stood_in_for(block))
        out = block(x)
        return (out, out.sum()) if rest == ("scan",) else out

    stacked.fold_via(record)(jnp.ones(3))
    stacked.scan_via(lambda b, x: record(b, x, "scan"))(jnp.ones(3))
    stacked.vmap_via(record)(jnp.ones(3))
    assert len(seen) == 3 and all(original is stacked.stacked for original in seen)
    assert stood_in_for(stacked.stacked) is None


def _raises(*args):
    raise ZeroDivisionError("boom")


@pytest.mark.parametrize(
    ("splitter", "expected"),
    [
        (_raises, "The block splitter's split for MutableBlock .* raised ZeroDivisionError"),
        (lambda block: block.weight, "split for MutableBlock .* returned BatchTracer"),
        (
            lambda block: (block.weight, _raises),
            "The block splitter's rebuild for MutableBlock .* raised ZeroDivisionError",
        ),
    ],
)
def test_a_misbehaving_block_splitter_is_named(bryo_plugin_manager, splitter, expected):
    """Each failed inside `Stacked` naming nothing ("cannot unpack non-iterable ...", a
    bare ZeroDivisionError)."""
    from bryo_plugins import PluginCallbackError

    class Blocks:
        @hookimpl
        def bryo_scan_block_splitters(self):
            return {MutableBlock: splitter}

    bryo_plugin_manager.register(Blocks(), name="acme-blocks")
    with pytest.raises(PluginCallbackError, match=expected) as raised:
        Stacked.init(LAYERS, MutableBlock)(jnp.arange(1.0, 5.0))
    message = str(raised.value)
    assert "from plugin 'acme-blocks', hook `bryo_scan_block_splitters`" in message
    assert "`split(block)` must return `(pytree, rebuild)`" in message


@dataclasses.dataclass(frozen=True)
class Tagged:
    """A leaf carrying its own axis (as a named array does)."""

    array: jax.Array


class _TaggedLeaf:
    def __init__(self, unbind):
        self._unbind = unbind

    def unbind(self, leaf, axis):
        return self._unbind(leaf, axis)

    def bind(self, element, axis, stacked):
        return Tagged(stacked)

    def describe(self, leaf):
        return "Tagged"


@pytest.mark.parametrize(
    ("unbind", "expected"),
    [
        (_raises, "The `unbind` of the NamedLeaf for Tagged .* raised ZeroDivisionError"),
        (lambda leaf, axis: leaf.array, "The `unbind` of the NamedLeaf for Tagged .* returned"),
    ],
)
def test_a_misbehaving_named_leaf_is_named(bryo_plugin_manager, unbind, expected):
    from bryo_plugins import PluginCallbackError

    class Leaves:
        @hookimpl
        def bryo_scan_named_leaves(self):
            return {Tagged: _TaggedLeaf(unbind)}

    bryo_plugin_manager.register(Leaves(), name="acme-leaves")
    with pytest.raises(PluginCallbackError, match=expected) as raised:
        scan(lambda c, x: (c, x.array), LAYERS)(0.0, Tagged(jnp.ones(4)))
    assert "from plugin 'acme-leaves', hook `bryo_scan_named_leaves`" in str(raised.value)


def test_a_scan_error_a_splitter_raises_is_its_message_and_passes(bryo_plugin_manager):
    from bryo_plugins import PluginCallbackError

    def refuses(block):
        raise ScanAxisError("this block has no layer axis")

    class Blocks:
        @hookimpl
        def bryo_scan_block_splitters(self):
            return {MutableBlock: refuses}

    bryo_plugin_manager.register(Blocks(), name="acme-blocks")
    with pytest.raises(ScanAxisError, match="no layer axis") as raised:
        Stacked.init(LAYERS, MutableBlock)(jnp.arange(1.0, 5.0))
    assert not isinstance(raised.value, PluginCallbackError)
