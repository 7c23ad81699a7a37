"""Real Haliax arrays, axes and blocks through bryo's scan, fold, map, Stacked and BlockSeq,
against Haliax's own functions."""

# Haliax is not skipped when it fails to import: it is this plugin's own dependency
# (`haliax>=1.4.dev0`, the release that imports on every JAX bryo supports, 0.7.2 to the
# newest), installed with it in every test environment (`hatch test`, `jax-oldest`); a
# Haliax that does not import is a broken environment to see, not a test to skip.
import equinox as eqx
import haliax
import haliax.nn as hnn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bryo_named
import bryo_scan
import bryo_transforms
from bryo_haliax import from_haliax, to_haliax
from bryo_scan import ScanAxisError, ScanCheckpointPolicy

Time = haliax.Axis("Time", 4)
Embed = haliax.Axis("Embed", 3)
Mlp = haliax.Axis("Mlp", 5)
Layers = haliax.Axis("Layers", 3)
XS = haliax.random.normal(jax.random.key(0), (Time, Embed))


class Block(eqx.Module):
    up: hnn.Linear
    down: hnn.Linear

    @classmethod
    def init(cls, embed, mlp, *, key):
        k1, k2 = jax.random.split(key)
        return cls(hnn.Linear.init(embed, mlp, key=k1), hnn.Linear.init(mlp, embed, key=k2))

    def __call__(self, x):
        return x + self.down(haliax.tanh(self.up(x)))


KEYS = jax.random.split(jax.random.key(1), Layers.size)


def axes_of(tree):
    return [leaf.axes for leaf in jax.tree.leaves(tree, is_leaf=haliax.is_named_array)]


def assert_named_close(got, want):
    assert isinstance(got, haliax.NamedArray) and got.axes == want.axes
    np.testing.assert_allclose(got.array, want.array, rtol=1e-5, atol=1e-6)


def running(carry, x):
    carry = carry + x
    return carry, carry * 2.0


def test_scan_fold_and_map_take_haliax_arrays_and_axes():
    init = haliax.zeros(Embed)
    want_carry, want_ys = haliax.scan(running, Time)(init, XS)
    for axis in (Time, "Time"):
        carry, ys = bryo_scan.scan(running, axis)(init, XS)
        assert_named_close(carry, want_carry)
        assert_named_close(ys, want_ys)
    folded = bryo_scan.fold(lambda c, x: c + x, Time)(init, XS)
    assert_named_close(folded, haliax.fold(lambda c, x: c + x, Time)(init, XS))
    mapped = bryo_scan.map(lambda x: x * 3.0, Time)(XS)
    assert_named_close(mapped, haliax.map(lambda x: x * 3.0, Time)(XS))


def test_a_checkpoint_policy_keeps_the_gradients():
    def loss(xs, policy):
        carry, _ = bryo_scan.scan(running, Time, remat=policy)(haliax.zeros(Embed), xs)
        return haliax.sum(carry * carry).scalar()

    plain = jax.grad(lambda xs: loss(xs, False))(XS)
    for policy in (True, "nested", ScanCheckpointPolicy(save_carries=True, save_inputs=False)):
        assert_named_close(jax.grad(lambda xs, p=policy: loss(xs, p))(XS), plain)


def test_stacked_haliax_blocks_carry_the_layers_axis_as_haliax_does():
    ours = bryo_scan.Stacked.init(Layers, Block)(Embed, Mlp, key=KEYS)
    theirs = hnn.Stacked.init(Layers, Block)(Embed, Mlp, key=KEYS)
    assert axes_of(ours.stacked) == axes_of(theirs.stacked)
    assert ours.stacked.up.weight.axes[0] == Layers
    x = XS["Time", 0]
    assert_named_close(ours.fold(x), theirs.fold(x))
    assert_named_close(ours.fold(x), ours.get_layer(2)(ours.get_layer(1)(ours.get_layer(0)(x))))
    seq = bryo_scan.BlockSeq.init(Layers, Block)(Embed, Mlp, key=KEYS)
    assert_named_close(seq.fold(x), theirs.fold(x))


def test_stacked_scan_and_remat_over_haliax_blocks():
    class Scanning(Block):
        def __call__(self, x):
            y = Block.__call__(self, x)
            return y, haliax.sum(y, Embed)

    ours = bryo_scan.Stacked.init(Layers, Scanning, gradient_checkpointing=True)(
        Embed, Mlp, key=KEYS
    )
    theirs = hnn.Stacked.init(Layers, Scanning)(Embed, Mlp, key=KEYS)
    x = XS["Time", 0]
    (carry, outs), (want_carry, want_outs) = ours.scan(x), theirs.scan(x)
    assert_named_close(carry, want_carry)
    assert_named_close(outs, want_outs)
    assert outs.axes == (Layers,)


def test_bryo_grad_over_a_haliax_model():
    model = bryo_scan.Stacked.init(Layers, Block)(Embed, Mlp, key=KEYS)
    x = XS["Time", 0]

    def loss(model, x):
        return haliax.sum(model.fold(x) ** 2).scalar()

    grads = bryo_transforms.grad(loss)(model, x)
    want = eqx.filter_grad(loss)(model, x)
    got = grads.flat_state()[("stacked", "up", "weight", 0)].value
    np.testing.assert_allclose(got, want.stacked.up.weight.array, rtol=1e-5, atol=1e-6)


def test_bryo_and_haliax_arrays_scan_side_by_side():
    ours = from_haliax(XS)

    def step(carry, xs):
        theirs_x, ours_x = xs
        return carry + theirs_x, ours_x * 2.0

    carry, (doubled) = bryo_scan.scan(step, "Time")(haliax.zeros(Embed), (XS, ours))
    assert isinstance(carry, haliax.NamedArray) and isinstance(doubled, bryo_named.NamedArray)
    assert doubled.axis_names == ("Time", "Embed")
    np.testing.assert_allclose(carry.array, XS.array.sum(axis=0), rtol=1e-6)


def test_bryo_hax_functions_refuse_haliax_arrays_saying_how_to_convert():
    for call in (
        lambda: bryo_named.dot(XS, XS, axis="Embed"),
        lambda: bryo_named.sum(XS, "Time"),
        lambda: bryo_named.exp(XS),
    ):
        with pytest.raises(bryo_named.AxisError, match=r"haliax.*from_haliax"):
            call()


def test_conversions_round_trip_and_refuse_the_wrong_type():
    back = to_haliax(from_haliax(XS))
    assert back.axes == XS.axes and np.array_equal(back.array, XS.array)
    with pytest.raises(TypeError, match=r"haliax\.NamedArray"):
        from_haliax(jnp.ones(2))
    with pytest.raises(TypeError, match="bryo's NamedArray"):
        to_haliax(XS)


def test_unnamed_stacking_of_haliax_arrays_is_refused():
    with pytest.raises(ScanAxisError, match="needs a name"):
        bryo_scan.Stacked.init(bryo_scan.AxisInfo(None, 3, 0), Block)(Embed, Mlp, key=KEYS)


def test_bryo_hax_registered_as_haliax_is_left_to_bryo_named(monkeypatch):
    # Haliax's suites run against bryo.hax imported as `haliax` (the compat yardstick).
    import importlib
    import sys

    import bryo.hax

    monkeypatch.setitem(sys.modules, "haliax", bryo.hax)
    monkeypatch.delitem(sys.modules, "bryo_haliax._plugin")
    plugin = importlib.import_module("bryo_haliax._plugin")  # a copy; the registered one stays
    assert not plugin.REAL_HALIAX
    assert plugin.bryo_scan_named_leaves() == {}
    assert plugin.bryo_scan_resolve_axis(bryo.hax.Axis("Time", 2)) is None
