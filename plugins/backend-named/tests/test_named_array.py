"""NamedArray: creation, operations by axis name, indexing, rearrange, vmap, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bryo_named as hax
from bryo_named import Axis, AxisError, NamedArray

Batch, Feat, Out = Axis("Batch", 2), Axis("Features", 3), Axis("Out", 4)


def _x():
    return hax.named(jnp.arange(6.0).reshape(2, 3), (Batch, Feat))


def test_creation():
    assert hax.zeros({"Time": 5, "Features": 3}).shape == {"Time": 5, "Features": 3}
    assert hax.ones((Batch, Feat), dtype=jnp.int32).dtype == jnp.int32
    assert float(hax.full(Feat, float("inf")).max()) == float("inf")
    assert hax.arange(Axis("Layers", 4)).array.tolist() == [0, 1, 2, 3]
    assert hax.arange(Axis("L", 3), start=1, step=2).array.tolist() == [1, 3, 5]
    sample = hax.random.normal(jax.random.key(0), {"Time": 10, "Features": 2})
    assert sample.axis_names == ("Time", "Features") and sample.dtype == jnp.float32
    u = hax.random.uniform(jax.random.key(1), Feat, minval=2.0, maxval=3.0)
    assert bool(((u >= 2.0) & (u < 3.0)).all())
    assert hax.named(jnp.ones((2, 3)), ("Batch", "Features")).axes == (Batch, Feat)


def test_axis_converts_to_its_size():
    Layers = Axis("Layers", 3)
    assert jax.random.split(jax.random.key(0), Layers).shape[0] == 3
    assert Layers.resize(5) == Axis("Layers", 5) and Layers.alias("L") == Axis("L", 3)


def test_broadcasting_by_name():
    x = _x()
    y = hax.named(jnp.array([10.0, 20.0]), (Batch,))
    z = x + y
    assert z.axes == (Batch, Feat)
    np.testing.assert_allclose(z.array, x.array + jnp.array([[10.0], [20.0]]))
    w = hax.named(jnp.arange(12.0).reshape(3, 4), (Feat, Out))
    assert (x * w).axes == (Batch, Feat, Out)
    # operand order does not matter for the values, only the axis order
    transposed = hax.named(x.array.T, (Feat, Batch))
    np.testing.assert_allclose((x - transposed).array, 0.0)
    assert (0.0 + x).axes == x.axes and (1 / (x + 1)).axes == x.axes
    assert (x + jnp.float32(2)).axes == x.axes and (2**x).axes == x.axes
    np.testing.assert_allclose(hax.maximum(x, 2.0).array, jnp.maximum(x.array, 2.0))
    np.testing.assert_allclose(hax.minimum(y, x).array, jnp.minimum(y.array[:, None], x.array))
    assert hax.where(x > 2, x, 0.0).axes == x.axes
    assert (-x).axes == x.axes and abs(x).axes == x.axes
    for fn in (hax.sin, hax.cos, hax.exp, hax.tanh, hax.relu, hax.sqrt, hax.nn.gelu):
        np.testing.assert_allclose(
            fn(x).array,
            getattr(jax.nn, fn.__name__, None)(x.array)
            if fn.__name__ in ("relu", "gelu")
            else getattr(jnp, fn.__name__)(x.array),
            rtol=1e-6,
        )


def test_reductions_and_dot():
    x = _x()
    assert x.sum("Features").axes == (Batch,)
    np.testing.assert_allclose(hax.mean(x, "Batch").array, x.array.mean(0))
    assert hax.max(x).axes == () and float(hax.max(x)) == 5.0
    assert float(x.min(("Batch", Feat))) == 0.0
    w = hax.named(jnp.arange(12.0).reshape(3, 4), (Feat, Out))
    out = hax.dot(x, w, axis="Features")
    assert out.axes == (Batch, Out)
    np.testing.assert_allclose(out.array, x.array @ w.array)
    np.testing.assert_allclose(hax.dot("Features", x, w).array, out.array)
    assert float(hax.dot(x, x)) == float((x.array**2).sum())
    np.testing.assert_allclose(hax.softmax(x, "Features").array, jax.nn.softmax(x.array, axis=1))


def test_stack_concatenate_rename():
    x = _x()
    flipped = hax.named(x.array.T, (Feat, Batch))
    s = hax.stack("Copies", [x, flipped])
    assert s.axes == (Axis("Copies", 2), Batch, Feat)
    np.testing.assert_allclose(s.array[1], x.array)
    c = hax.concatenate("Features", [x, x])
    assert c.axes == (Batch, Feat.resize(6))
    assert hax.rename(x, {"Features": "F"}).axis_names == ("Batch", "F")


def test_indexing_by_name():
    x = _x()
    assert x["Batch", 1].axes == (Feat,)
    np.testing.assert_allclose(x["Batch", 1].array, x.array[1])
    assert x["Features", 1:3].axes == (Batch, Feat.resize(2))
    assert float(x["Batch", 1, "Features", 2]) == 5.0
    assert x[{"Features": 0}].axes == (Batch,)
    dynamic = jax.jit(lambda a, i: a["Batch", i])(x, jnp.int32(1))
    np.testing.assert_allclose(dynamic.array, x.array[1])
    with pytest.raises(IndexError, match="out of range for axis 'Batch' of size 2"):
        x["Batch", 2]
    with pytest.raises(AxisError, match="Index a NamedArray by axis name"):
        x[0]


def test_rearrange():
    blocks = hax.named(jnp.arange(24.0).reshape(12, 2), ("block", "hidden"))
    split = hax.rearrange("block -> (outer inner)", blocks, outer=3)  # the seed's order
    assert split.shape == {"outer": 3, "inner": 4, "hidden": 2}
    np.testing.assert_allclose(split["outer", 1]["inner", 2].array, blocks["block", 6].array)
    assert hax.rearrange(split, "(outer inner) -> block").shape == {"block": 12, "hidden": 2}
    np.testing.assert_allclose(hax.rearrange(split, "(outer inner) -> block").array, blocks.array)
    assert split.rearrange("hidden outer -> ... hidden outer").axis_names == (
        "inner",
        "hidden",
        "outer",
    )
    assert hax.rearrange(blocks, "hidden -> h").axis_names == ("h", "block")  # unlisted axes follow
    with pytest.raises(AxisError, match="do not divide"):
        hax.rearrange(blocks, "block -> (outer inner)", outer=5)
    with pytest.raises(AxisError, match="give the sizes"):
        hax.rearrange(blocks, "block -> (a b c)", a=2)
    with pytest.raises(AxisError, match="'nope' is not in this array"):
        hax.rearrange(blocks, "nope -> x")


def test_missing_duplicate_and_wrong_size_axes_are_named():
    x = _x()
    with pytest.raises(
        AxisError,
        match=r"axis 'Time' is not in this array; its axes are \{'Batch': 2, 'Features': 3\}",
    ):
        x.sum("Time")
    with pytest.raises(AxisError, match=r"'Batch' has size 2 in this array, not 5"):
        x.sum(Batch.resize(5))
    with pytest.raises(AxisError, match="axis 'Batch' appears twice"):
        hax.zeros((Batch, Batch))
    with pytest.raises(AxisError, match="appears twice"):
        hax.rename(x, {"Features": "Batch"})
    with pytest.raises(AxisError, match="appears twice"):
        hax.stack("Batch", [x, x])
    with pytest.raises(AxisError, match="axis 'Features' has size 3 in one operand and 4"):
        x + hax.zeros({"Features": 4})
    with pytest.raises(AxisError, match="unnamed value of shape"):
        x + jnp.ones(3)
    with pytest.raises(AxisError, match="does not fit the axes"):
        NamedArray(jnp.ones((2, 2)), (Batch, Feat))
    with pytest.raises(AxisError, match="bare name has no size"):
        hax.zeros(("Batch",))


def test_vmap_over_named_axis():
    x = _x()
    bias = hax.named(jnp.array([1.0, 2.0, 3.0]), (Feat,))
    out = hax.vmap(lambda row, b: (row + b).sum("Features"), "Batch")(x, bias)
    assert out.axes == (Batch,)
    np.testing.assert_allclose(out.array, (x.array + bias.array).sum(1))
    assert hax.vmap(lambda row: row * 2, "Features")(x).axes == (Feat, Batch)


def test_pytree_under_jit_grad_vmap():
    x = _x()
    grad = jax.grad(lambda a: (hax.sin(a) * a).sum().array)(x)
    assert isinstance(grad, NamedArray) and grad.axes == x.axes
    np.testing.assert_allclose(grad.array, jnp.sin(x.array) + x.array * jnp.cos(x.array), rtol=1e-6)
    jitted = jax.jit(lambda a: a.sum("Batch"))(x)
    assert jitted.axes == (Feat,)
    assert jax.tree_util.tree_leaves(x)[0] is x.array


def test_tree_checkpoint_name_names_leaves():
    jaxpr = jax.make_jaxpr(lambda a: hax.tree_checkpoint_name(a, "y"))(_x())
    assert "name[name=y]" in str(jaxpr)


def test_axis_sizes_context():
    from bryo_scan import resolve_axis

    assert resolve_axis("Time").size is None
    with hax.axis_sizes(Time=7):
        assert resolve_axis("Time").size == 7
    assert resolve_axis(Axis("Time", 3)).size == 3


@settings(max_examples=10, deadline=None)
@given(
    perm=st.permutations([0, 1, 2]),
    sizes=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)),
)
def test_ops_do_not_depend_on_axis_order(perm, sizes):
    axes = tuple(Axis(n, s) for n, s in zip("abc", sizes, strict=True))
    x = hax.named(np.arange(np.prod(sizes), dtype=np.float32).reshape(sizes), axes)
    y = hax.named(np.transpose(x.array, perm), tuple(axes[i] for i in perm))
    np.testing.assert_allclose((x - y).array, 0.0)
    np.testing.assert_allclose(hax.dot(x, y, axis=("a", "b")).array, (x.array**2).sum((0, 1)))
    for name in "abc":
        np.testing.assert_allclose(
            x.sum(name).array,
            hax.rearrange(
                y.sum(name),
                " ".join(n for n in "abc" if n != name)
                + " -> "
                + " ".join(n for n in "abc" if n != name),
            ).array,
        )
