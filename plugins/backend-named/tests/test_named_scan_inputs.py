"""Which inputs a named scan splits (Haliax's rules), and stacks of layers taking per-layer
NamedArrays and keys."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bryo_named as hax
from bryo_named import Axis, NamedArray
from bryo_scan import BlockSeq, ScanAxisError, Stacked, fold, scan

eqx = pytest.importorskip("equinox")

Height, Width, Depth = Axis("Height", 5), Axis("Width", 3), Axis("Depth", 4)
data = hax.random.uniform(jax.random.key(0), (Height, Width, Depth))


def test_named_inputs_without_the_axis_reach_every_step():
    bias = hax.random.uniform(jax.random.key(1), (Width,))

    def step(carry, x, b):
        assert x.axes == (Width, Depth) and b.axes == (Width,)
        return carry + (x + b).sum().scalar(), (x + b).sum("Width")

    total, ys = scan(step, "Height")(0.0, data, bias)
    assert ys.axes == (Height, Depth)
    np.testing.assert_allclose(total, (data.array + bias.array[None, :, None]).sum(), rtol=1e-5)


def test_a_non_leading_axis_moves_to_the_front_of_outputs():
    _, selected = scan(lambda c, x: (c, x.take("Width", 2)), Depth)(0.0, data)
    assert selected.axes == (Depth, Height)
    np.testing.assert_allclose(selected.array, data.array[:, 2, :].T)


def test_scalars_and_plain_carries_are_not_scanned():
    init = jnp.arange(5.0)
    row = hax.random.uniform(jax.random.key(2), (Height,))
    # each step sees a 0-d slice of `row`, a Python 4.0, and keeps the plain carry plain
    total = fold(lambda acc, z, x: acc + z * x, "Height")(init, 4.0, row)
    assert isinstance(total, jax.Array)
    np.testing.assert_allclose(total, init + 4.0 * row.array.sum(), rtol=1e-5)
    named_total = fold(lambda acc, z, x: acc + z * x, "Height")(hax.named(init, "Height"), 4.0, row)
    assert isinstance(named_total, NamedArray) and named_total.axes == (Height,)


def test_is_scanned_keeps_plain_arrays_whole():
    table = jnp.arange(5.0)  # same length as Height, but meant for every step
    step = lambda c, x, t: c + x.sum().scalar() * t.sum()
    got = fold(step, "Height", is_scanned=hax.is_named_array)(0.0, data, table)
    np.testing.assert_allclose(got, data.array.sum() * 10.0, rtol=1e-5)


def test_errors_name_module_fields_and_keywords():
    class Foo(eqx.Module):
        my_array: jax.Array

    with pytest.raises(ScanAxisError, match=r"foo\.my_array has leading dimension 4"):
        scan(lambda c, foo: (c, foo.my_array), Height)(0, Foo(jnp.zeros((4, 3))))
    with pytest.raises(ValueError, match="mask has axis 'Height' of size 2"):
        fold(lambda c, x, mask: c, "Height")(0.0, data, mask=hax.zeros({"Height": 2}))


Layers, Hidden = Axis("Layers", 3), Axis("Hidden", 4)


class Block(eqx.Module):
    """A Haliax-style block: built by `init`, called with a per-layer key."""

    weight: NamedArray
    gain: jax.Array

    @staticmethod
    def init(weight, gain):
        return Block(weight, gain)

    def __call__(self, x, scale, *, key):
        noise = hax.random.normal(key, x.axes)
        return (x * self.weight + noise) * scale * self.gain


def _blocks(factory):
    weight = hax.random.uniform(jax.random.key(3), (Layers, Hidden))
    return factory.init(Layers, Block)(weight, jnp.arange(1.0, 4.0))


@pytest.mark.parametrize("factory", [Stacked, BlockSeq])
def test_stack_splits_named_and_key_arguments_per_layer(factory):
    keys = jax.random.split(jax.random.key(4), Layers.size)
    x = hax.ones(Hidden)
    layer_scale = hax.named(jnp.array([1.0, 0.5, 0.25]), ("Layers",))  # one per layer
    want = x
    for i, block in enumerate(_blocks(BlockSeq).unstacked()):
        want = block(want, layer_scale["Layers", i], key=keys[i])
    got = _blocks(factory).fold(x, layer_scale, key=keys)
    assert got.axes == (Hidden,)
    np.testing.assert_allclose(got.array, want.array, rtol=1e-5)
    shared_scale = hax.full(Hidden, 0.5)  # no Layers axis: every layer gets it
    got = _blocks(factory).fold(x, shared_scale, key=keys)
    want = x
    for i, block in enumerate(_blocks(BlockSeq).unstacked()):
        want = block(want, shared_scale, key=keys[i])
    np.testing.assert_allclose(got.array, want.array, rtol=1e-5)


@pytest.mark.parametrize("factory", [Stacked, BlockSeq])
def test_vmap_via_applies_every_block_to_the_same_input(factory):
    x = hax.ones(Hidden)
    out = _blocks(factory).vmap_via(lambda block, x, z: x * block.weight + z)(x, 2.0)
    assert out.axes == (Layers, Hidden)
    np.testing.assert_allclose(out.array, _blocks(Stacked).stacked.weight.array + 2.0)
