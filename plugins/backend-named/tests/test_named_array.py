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
    # the operand whose axes include the other's sets the order, as in Haliax
    assert (y + x).axes == (Batch, Feat) and (hax.named(x.array.T, (Feat, Batch)) + y).axes == (
        Feat,
        Batch,
    )
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


def test_methods_mirror_the_module_functions():
    x = _x()
    w = hax.named(jnp.arange(12.0).reshape(3, 4), (Feat, Out))
    np.testing.assert_allclose(
        x.dot(w, axis="Features").array, hax.dot(x, w, axis="Features").array
    )
    assert x.argmax("Features").array.tolist() == [2, 2]
    assert x.argmin("Batch").axes == (Feat,)
    assert x.rename({"Features": "F"}).axis_names == ("Batch", "F")
    assert x.take("Batch", 1).array.tolist() == [3.0, 4.0, 5.0]
    assert x.rearrange("Batch Features -> Features Batch").axis_names == ("Features", "Batch")
    for name in ("sum", "mean", "max", "min", "prod", "var", "std", "all", "any"):
        np.testing.assert_allclose(
            getattr(x, name)("Features").array, getattr(hax, name)(x, "Features").array
        )


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
    np.testing.assert_allclose(out.array, (x.array + bias.array[None, :]).sum(1))
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


@pytest.mark.slow
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


def test_scalar_of_an_array_without_axes():
    x = _x()
    total = x.sum().scalar()
    assert isinstance(total, jax.Array) and total.shape == () and float(total) == 15.0
    assert float(jax.jit(lambda a: a.sum().scalar())(x)) == 15.0
    with pytest.raises(AxisError, match=r"`scalar\(\)` needs a NamedArray without axes"):
        x.scalar()


def test_take_by_integer_and_by_named_indices():
    x = _x()  # Batch 2, Features 3
    np.testing.assert_allclose(x.take("Features", 2).array, x.array[:, 2])
    assert hax.take(x, Feat, 2).axes == (Batch,)
    picks = hax.named(jnp.array([2, 0, 0, 1]), ("Pick",))
    spliced = x.take("Features", picks)  # the index's axes take the axis's place
    assert spliced.axes == (Batch, Axis("Pick", 4))
    np.testing.assert_allclose(spliced.array, x.array[:, [2, 0, 0, 1]])
    per_row = hax.named(jnp.array([[2, 0], [1, 1]]), ("Batch", "Pick"))
    gathered = x.take("Features", per_row)  # shared axis: one index list per batch row
    assert gathered.axes == (Batch, Axis("Pick", 2))
    np.testing.assert_allclose(gathered.array, [[2.0, 0.0], [4.0, 4.0]])
    same_name = hax.named(jnp.array([[1], [2]]), ("Batch", "Features"))
    assert x.take("Features", same_name).axes == (Batch, Axis("Features", 1))
    with pytest.raises(AxisError, match="must hold integers"):
        x.take("Features", hax.named(jnp.ones(2), ("Pick",)))
    with pytest.raises(AxisError, match="'Time' is not in this array"):
        x.take("Time", 0)


def test_comparisons_and_isclose_line_axes_up_by_name():
    x = _x()
    flipped = hax.rearrange(x, ("Features", "Batch"))
    assert bool(hax.all(hax.equal(x, flipped))) and hax.equal(x, flipped).axes == x.axes
    assert not bool(hax.any(hax.not_equal(x, flipped)))
    assert hax.less(x, 3.0).array.tolist() == [[True, True, True], [False, False, False]]
    assert bool(hax.all(hax.greater_equal(x, hax.less_equal(x, x).astype(x.dtype) * 0)))
    assert bool(hax.all(hax.greater(x + 1, x)))
    close = hax.isclose(x, flipped + 1e-7, atol=1e-5)
    assert close.axes == x.axes and bool(hax.all(close))
    assert not bool(hax.any(hax.isclose(x, x + 1.0)))


def test_rearrange_by_a_sequence_of_axes():
    x = hax.zeros({"a": 1, "b": 2, "c": 3, "d": 4})
    assert x.rearrange(("d", "b", "a", "c")).axis_names == ("d", "b", "a", "c")
    assert x.rearrange((Axis("c", 3), ...)).axis_names == ("c", "a", "b", "d")
    assert hax.rearrange(x, (..., "a")).axis_names == ("b", "c", "d", "a")
    assert hax.rearrange(x, ["b", ..., "a"]).axis_names == ("b", "c", "d", "a")
    values = hax.named(jnp.arange(6.0).reshape(2, 3), ("r", "s"))
    np.testing.assert_allclose(values.rearrange(("s", "r")).array, values.array.T)
    with pytest.raises(AxisError, match=r"leaves out \['c', 'd'\] .* add `\.\.\.` for the others"):
        x.rearrange(("a", "b"))
    # several `...`: a partial order, as in Haliax (the other axes stay near their places)
    assert x.rearrange((..., "a", ...)).axis_names == ("a", "b", "c", "d")
    assert x.rearrange((..., "d", "b", ...)).axis_names == ("a", "d", "b", "c")
    assert x.rearrange(("c", ..., "a", ...)).axis_names == ("c", "a", "b", "d")
    with pytest.raises(AxisError, match=r"`axes`: axis 'e' is not in this array"):
        x.rearrange((..., "e"))
    with pytest.raises(AxisError, match="'a' appears twice"):
        x.rearrange(("a", "a", ...))
    with pytest.raises(AxisError, match="'c' has size 3 in this array, not 5"):
        x.rearrange((Axis("c", 5), ...))


def test_an_array_without_axes_mixes_with_plain_arrays():
    total = _x().sum()
    plain = jnp.arange(3.0)
    for out in (plain + total, total + plain, hax.add(plain, total), total * plain):
        assert isinstance(out, jax.Array) and out.shape == (3,)
    np.testing.assert_allclose(plain + total, plain + 15.0)
    assert isinstance(total + jnp.asarray(1.0), NamedArray)  # scalar + scalar stays named
    with pytest.raises(AxisError, match="unnamed value of shape"):
        _x() + jnp.ones(3)  # an array with axes still needs names


def test_vmap_over_several_axes():
    x = hax.named(jnp.arange(24.0).reshape(2, 3, 4), ("B1", "B2", "F"))
    out = hax.vmap(lambda v: v.sum("F"), ("B1", "B2"))(x)
    assert out.axis_names == ("B1", "B2")
    np.testing.assert_allclose(out.array, x.array.sum(-1))
    swapped = hax.vmap(lambda v: v.sum("F"), {"B2": 3, "B1": 2})(x)
    assert swapped.axis_names == ("B2", "B1")
    np.testing.assert_allclose(swapped.array, x.array.sum(-1).T)


def test_array_predicates():
    assert hax.is_jax_or_hax_array_like(_x()) and hax.is_jax_or_hax_array_like(jnp.ones(()))
    assert hax.is_jax_or_hax_array_like(np.ones(2)) and not hax.is_jax_or_hax_array_like(1.0)
    assert hax.is_named_array(_x()) and not hax.is_named_array(jnp.ones(2))
