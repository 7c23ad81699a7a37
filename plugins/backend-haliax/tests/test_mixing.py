"""bryo's NamedArray and Haliax's in one call: scan, fold, map, Stacked and BlockSeq,
operators and checkpoint policies either work (axes matched by name) or raise an error
that says which to convert, never a wrong shape."""

import equinox as eqx
import haliax
import haliax.nn as hnn
import jax
import numpy as np
import pytest

import bryo_named
import bryo_scan
from bryo_haliax import from_haliax, to_haliax
from bryo_scan import ScanAxisError, ScanCheckpointPolicy

Time = haliax.Axis("Time", 4)
Embed = haliax.Axis("Embed", 3)
Mlp = haliax.Axis("Mlp", 5)
Layers = haliax.Axis("Layers", 2)
XS = haliax.random.normal(jax.random.key(0), (Time, Embed))
OURS = from_haliax(XS)
KEYS = jax.random.split(jax.random.key(1), Layers.size)


class Block(eqx.Module):
    up: hnn.Linear
    down: hnn.Linear

    @classmethod
    def init(cls, *, key):
        k1, k2 = jax.random.split(key)
        return cls(hnn.Linear.init(Embed, Mlp, key=k1), hnn.Linear.init(Mlp, Embed, key=k2))

    def __call__(self, x):
        hidden = haliax.tree_checkpoint_name(haliax.tanh(self.up(x)), "hidden")
        return x + self.down(hidden)


def running(carry, x):
    carry = carry + x
    return carry, carry * 2.0


def names(array):
    return tuple(a.name for a in array.axes)


@pytest.mark.parametrize(
    "axis, xs, init",
    [
        (bryo_named.Axis("Time", 4), XS, haliax.zeros(Embed)),  # bryo's axis, Haliax's arrays
        (Time, OURS, from_haliax(haliax.zeros(Embed))),  # Haliax's axis, bryo's arrays
    ],
    ids=["bryo-axis", "haliax-axis"],
)
def test_an_axis_of_either_library_scans_arrays_of_the_other(axis, xs, init):
    want_carry, want_ys = haliax.scan(running, Time)(haliax.zeros(Embed), XS)
    carry, ys = bryo_scan.scan(running, axis)(init, xs)
    assert type(ys) is type(xs) and names(ys) == ("Time", "Embed")
    np.testing.assert_allclose(np.asarray(ys.array), want_ys.array, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(carry.array), want_carry.array, rtol=1e-6)
    folded = bryo_scan.fold(lambda c, x: c + x, axis)(init, xs)
    np.testing.assert_allclose(np.asarray(folded.array), XS.array.sum(0), rtol=1e-6)


def test_map_over_a_tuple_of_both_kinds():
    theirs, ours = bryo_scan.map(lambda pair: (pair[0] * 2.0, pair[1] + 1.0), "Time")((XS, OURS))
    assert isinstance(theirs, haliax.NamedArray) and isinstance(ours, bryo_named.NamedArray)
    assert names(theirs) == names(ours) == ("Time", "Embed")
    np.testing.assert_allclose(theirs.array, XS.array * 2.0, rtol=1e-6)


def test_an_axis_of_the_wrong_size_is_refused_whichever_library_made_it():
    for axis in (haliax.Axis("Time", 5), bryo_named.Axis("Time", 5)):
        with pytest.raises(ScanAxisError, match=r"'Time' of size 4 \(haliax.NamedArray"):
            bryo_scan.scan(running, axis)(haliax.zeros(Embed), XS)


def test_bryo_operators_refuse_a_haliax_operand_saying_how_to_convert():
    for op in (lambda: OURS + XS, lambda: OURS * XS, lambda: OURS < XS):
        with pytest.raises(bryo_named.AxisError, match=r"haliax.*from_haliax"):
            op()
    with pytest.raises(ValueError, match="Cannot apply"):  # Haliax's operator, Haliax's error
        XS + OURS
    np.testing.assert_allclose((OURS + from_haliax(XS)).array, XS.array * 2.0, rtol=1e-6)


# Every bryo.hax function that takes arrays, given a Haliax one (several raised an
# AttributeError, `'NamedArray' object has no attribute 'position_of'`, or computed on it)
HALIAX_INPUTS = {
    "softmax": lambda hax: hax.nn.softmax(XS, axis="Embed"),
    "stack": lambda hax: hax.stack("Pair", [XS, XS]),
    "concatenate": lambda hax: hax.concatenate("Time", [OURS, XS]),
    "rename": lambda hax: hax.rename(XS, {"Time": "T"}),
    "split": lambda hax: hax.split(XS, "Time", [Time.resize(2), Time.resize(2)]),
    "flatten_axes": lambda hax: hax.flatten_axes(XS, ("Time", "Embed"), "Flat"),
    "unflatten_axis": lambda hax: hax.unflatten_axis(XS, "Time", {"A": 2, "B": 2}),
    "cumsum": lambda hax: hax.cumsum(XS, "Time"),
    "sum": lambda hax: hax.sum(XS, "Time"),
    "logsumexp": lambda hax: hax.logsumexp(XS),
    "tril": lambda hax: hax.tril(XS, "Time", "Embed"),
    "argmax": lambda hax: hax.argmax(XS, "Time"),
    "argsort": lambda hax: hax.argsort(XS, "Time"),
    "named": lambda hax: hax.named(XS, ("Time", "Embed")),
    "broadcast_to": lambda hax: hax.broadcast_to(XS, (Mlp, Time, Embed)),
    "pad": lambda hax: hax.pad(XS, {"Time": (1, 1)}),
    "roll": lambda hax: hax.roll(XS, 1, "Time"),
    "tile": lambda hax: hax.tile(XS, {"Time": 2}),
    "zeros_like": lambda hax: hax.zeros_like(XS),
    "array_equal": lambda hax: hax.array_equal(OURS, XS),
    "index": lambda hax: hax.index(XS, {"Time": 0}),
    # a Haliax index array into a bryo array ("cannot index by an unnamed array of
    # shape ('Pick',)" before: its axis names read as a shape)
    "index/by a haliax index array": lambda hax: OURS[
        {"Time": haliax.named(jax.numpy.array([0, 1]), "Pick")}
    ],
}


@pytest.mark.parametrize("name", sorted(HALIAX_INPUTS))
def test_bryo_hax_functions_refuse_a_haliax_array_saying_how_to_convert(name):
    from bryo import hax

    with pytest.raises(
        bryo_named.AxisError, match=rf"`{name.partition('/')[0]}` got a haliax.*from_haliax"
    ):
        HALIAX_INPUTS[name](hax)


def test_bryo_hax_makes_arrays_over_haliax_axes():
    from bryo import hax

    # a Haliax user's axes (haliax.Axis) as bryo.hax shapes: the "bare name" error before
    for made in (
        hax.zeros((Time, Embed)),
        hax.ones((Time, Embed)),
        hax.full((Time, Embed), 2.0),
        hax.random.normal(jax.random.key(0), (Time, Embed)),
        hax.arange((Time, Embed)),
    ):
        assert isinstance(made, bryo_named.NamedArray)
        assert made.shape == {"Time": 4, "Embed": 3}
    assert hax.arange(Time).shape == {"Time": 4}
    with pytest.raises(bryo_named.AxisError, match="a bare name has no size"):
        hax.zeros(("Time", "Embed"))


@pytest.mark.parametrize("kind", [bryo_scan.Stacked, bryo_scan.BlockSeq])
def test_a_bryo_axis_stacks_haliax_blocks_with_a_haliax_layers_axis(kind):
    ours = kind.init(bryo_named.Axis("Layers", 2), Block)(key=KEYS)
    theirs = hnn.Stacked.init(Layers, Block)(key=KEYS)
    x = XS["Time", 0]
    got, want = ours.fold(x), theirs.fold(x)
    assert isinstance(got, haliax.NamedArray) and got.axes == want.axes
    np.testing.assert_allclose(got.array, want.array, rtol=1e-5, atol=1e-6)
    if kind is bryo_scan.Stacked:
        assert ours.stacked.up.weight.axes == theirs.stacked.up.weight.axes


@pytest.mark.parametrize("kind", [bryo_scan.Stacked, bryo_scan.BlockSeq])
def test_haliax_blocks_given_a_bryo_array_say_which_to_convert(kind):
    blocks = kind.init(Layers, Block)(key=KEYS)
    with pytest.raises(Exception) as caught:  # Haliax's own error, from inside the block
        blocks.fold(OURS["Time", 0])
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert "holds haliax.core.NamedArray arrays but was given bryo_named" in notes
    assert "bryo_haliax.to_haliax(x)" in notes
    converted = blocks.fold(to_haliax(OURS["Time", 0]))  # converted, it runs
    assert names(converted) == ("Embed",)


def test_a_checkpoint_policy_saves_a_haliax_blocks_named_internals(capsys):
    def residuals(policy):
        stacked = bryo_scan.Stacked.init(Layers, Block, gradient_checkpointing=policy)(key=KEYS)
        arrays, static = eqx.partition(stacked, eqx.is_array)

        def loss(arrays, x):
            return haliax.sum(eqx.combine(arrays, static).fold(x) ** 2).scalar()

        x = XS["Time", 0]
        jax.ad_checkpoint.print_saved_residuals(loss, arrays, x)
        return len(capsys.readouterr().out.splitlines()), eqx.filter_grad(loss)(arrays, x)

    (named, got), (plain, want) = (
        residuals(ScanCheckpointPolicy(save_block_internals=["hidden"])),
        residuals(ScanCheckpointPolicy()),
    )
    assert named == plain + 1  # the `hidden` the Haliax block named, saved for all layers
    np.testing.assert_allclose(
        got.stacked.up.weight.array, want.stacked.up.weight.array, rtol=1e-5, atol=1e-6
    )
