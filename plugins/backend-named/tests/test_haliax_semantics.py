"""bryo.hax follows Haliax where both have a name: broadcasting only onto the operand with
every axis, axis tuples for `arange`/`roll`/`pad`, `dot(..., out_axes=)`, partial orders,
`broadcast_to`/`broadcast_axis`, and `jnp` functions refusing NamedArrays."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bryo_named as hax
from bryo_named import Axis, AxisError, NamedArray

H, W, D = hax.make_axes(H=2, W=3, D=4)


def _values(*axes):
    return hax.arange(axes, dtype=jnp.float32)


def test_make_axes_in_keyword_order():
    assert (H, W, D) == (Axis("H", 2), Axis("W", 3), Axis("D", 4))


def test_no_operand_with_every_axis_is_an_error_naming_the_fix():
    hd, wd = _values(H, D), _values(W, D)
    fix = r"hax\.broadcast_axis\(x, Axis\('W', 3\)\)` on the operand with axes \('H', 'D'\)"
    with pytest.raises(AxisError, match=r"`add`: no operand's axes include the others' .*" + fix):
        hd + wd
    with pytest.raises(AxisError, match=r"\('H',\) and \('W',\)"):
        _values(H) * _values(W)
    with pytest.raises(ValueError):  # AxisError is a ValueError, as Haliax raises
        hax.where(hd > 0, hd, wd)
    # the explicit spelling works and gives the outer sum
    total = hax.broadcast_axis(hd, W) + wd
    assert total.axes == (W, H, D)
    expected = hd.array[None, :, :] + wd.array[:, None, :]
    np.testing.assert_allclose(total.array, expected)


def test_the_operand_with_every_axis_sets_the_order():
    hwd, w = _values(H, W, D), _values(W)
    assert (w + hwd).axes == (H, W, D) and (hwd + w).axes == (H, W, D)
    dh = _values(H, D).rearrange((D, H))
    assert (_values(H, D) + dh).axes == (H, D) and (dh + _values(H, D)).axes == (D, H)
    np.testing.assert_allclose((w * hwd).array, w.array[None, :, None] * hwd.array)
    # three operands (clip, where): the one with every axis wins
    clipped = hax.clip(hwd, hax.full((H, W), 3.0), hax.full((W, D), 7.0))
    assert clipped.axes == (H, W, D)
    np.testing.assert_allclose(clipped.array, jnp.clip(hwd.array, 3.0, 7.0))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from("abcd"), unique=True, max_size=4),
    st.lists(st.sampled_from("abcd"), unique=True, max_size=4),
)
def test_broadcast_succeeds_exactly_when_one_side_holds_the_other(left, right):
    sizes = {"a": 1, "b": 2, "c": 3, "d": 2}
    x = hax.zeros({n: sizes[n] for n in left})
    y = hax.ones({n: sizes[n] for n in right})
    if set(right) <= set(left) or set(left) <= set(right):
        out = x + y
        wider = x if set(right) <= set(left) else y
        assert out.axes == wider.axes and bool((out == 1.0).all())
    else:
        with pytest.raises(AxisError, match="no operand's axes include the others'"):
            x + y


def test_broadcast_to_and_broadcast_axis():
    w = _values(W)
    out = hax.broadcast_to(w, (H, W))
    assert out.axes == (H, W)
    np.testing.assert_allclose(out.array, jnp.broadcast_to(w.array, (2, 3)))
    assert hax.broadcast_to(w, (W, H)).axes == (W, H)
    assert hax.broadcast_to(2.0, (H,)).axes == (H,)
    assert w.broadcast_axis((H, D)).axes == (H, D, W)
    assert _values(W, D).broadcast_axis((H, "W")).axes == (H, W, D)
    assert hax.broadcast_to(_values(D, W), (H, W, D), ensure_order=False).axes == (H, D, W)
    with pytest.raises(AxisError, match=r"axes \['D'\] are not in `axes` .*broadcast_axis"):
        hax.broadcast_to(_values(W, D), (H, W))
    with pytest.raises(AxisError, match=r"'Q' is a new axis .* give its size: Axis\('Q', size\)"):
        hax.broadcast_axis(w, "Q")
    with pytest.raises(AxisError, match="'W' has size 3 in this array, not 5"):
        hax.broadcast_to(w, (H, W.resize(5)))


def test_arange_over_several_axes():
    grid = hax.arange((H, W))
    assert grid.axes == (H, W) and grid.array.tolist() == [[0, 1, 2], [3, 4, 5]]
    np.testing.assert_allclose(
        hax.arange((H, W), start=1.0, step=0.5).array, 1.0 + 0.5 * jnp.arange(6.0).reshape(2, 3)
    )
    assert hax.arange(W, dtype=jnp.float32).dtype == jnp.float32
    with pytest.raises(AxisError, match="must be an Axis"):
        hax.arange("W")
    with pytest.raises(AxisError, match="must be an Axis"):
        hax.arange((H, "W"))


def test_roll_by_name_and_by_several_axes():
    grid = hax.arange((H, W))
    np.testing.assert_array_equal(hax.roll(grid, 1, "W").array, jnp.roll(grid.array, 1, 1))
    np.testing.assert_array_equal(
        hax.roll(grid, (1, 2), (H, W)).array, jnp.roll(grid.array, (1, 2), (0, 1))
    )
    np.testing.assert_array_equal(
        hax.roll(grid, hax.named(jnp.array(1), ()), H).array, jnp.roll(grid.array, 1, 0)
    )
    with pytest.raises(TypeError, match=r"`shift` of `roll` must be a scalar; .*\{'W': 3\}"):
        hax.roll(grid, hax.arange(W), H)
    with pytest.raises(AxisError, match="axis 'Q' is not in this array"):
        hax.roll(grid, 1, "Q")


def test_pad_by_axis():
    grid = hax.arange((H, W))
    padded = hax.pad(grid, {H: (1, 2), "W": (0, 1)}, constant_values=-1)
    assert padded.axes == (H.resize(5), W.resize(4))
    np.testing.assert_array_equal(
        padded.array, jnp.pad(grid.array, [(1, 2), (0, 1)], constant_values=-1)
    )
    edge = hax.pad(grid, {"W": (1, 1)}, mode="edge")
    np.testing.assert_array_equal(edge.array, jnp.pad(grid.array, [(0, 0), (1, 1)], mode="edge"))
    with pytest.raises(AxisError, match="`pad_width`: axis 'Width' is not in this array"):
        hax.pad(grid, {"Width": (1, 1)})
    with pytest.raises(AxisError, match=r"`pad_width` of axis 'H' must be a pair"):
        hax.pad(grid, {"H": 3})


def test_dot_out_axes_full_partial_and_outer():
    m1, m2 = hax.ones((H, W, D)), _values(D, W, H)
    ref = jnp.einsum("ijk,kji->jk", m1.array, m2.array)
    assert hax.dot(m1, m2, axis=H).axes == (W, D)
    out = hax.dot(m1, m2, axis=H, out_axes=(D, ...))
    assert out.axes == (D, W)
    np.testing.assert_allclose(out.array, ref.T)
    assert hax.dot(m1, m2, axis=H, out_axes=("D", "W")).axes == (D, W)
    outer = hax.dot(m1, m2, axis=(), out_axes=(..., D, H, ...))
    assert outer.axes == (D, H, W)
    np.testing.assert_allclose(outer.array, jnp.einsum("ijk,kji->kij", m1.array, m2.array))
    assert hax.dot(m1, m2, axis=(), out_axes=(..., D, ...)).axes == (H, W, D)
    with pytest.raises(AxisError, match=r"`out_axes` \('D',\) leaves out \['W'\]"):
        hax.dot(m1, m2, axis=H, out_axes=(D,))
    with pytest.raises(AxisError, match=r"`out_axes`: \['H'\] of .* are not among the axes"):
        hax.dot(m1, m2, axis=H, out_axes=(H, ...))
    with pytest.raises(AxisError, match="`out_axes` must be a sequence"):
        hax.dot(m1, m2, axis=H, out_axes=3)


def test_jnp_functions_refuse_named_arrays_as_in_haliax():
    x = _values(H, W)
    with pytest.raises(TypeError, match="sum requires ndarray or scalar arguments"):
        jnp.sum(x)  # type: ignore[arg-type]  # the point: JAX refuses it
    assert float(hax.sum(x)) == 15.0 and float(jnp.sum(x.array)) == 15.0
    assert float(jnp.sum(x.sum().scalar())) == 15.0


def test_reductions_take_a_named_where():
    x = _values(H, W)
    rows = hax.named(jnp.array([True, False]), (H,))
    assert float(hax.mean(x, where=rows)) == 1.0
    np.testing.assert_allclose(hax.sum(x, "H", where=rows).array, x.array[0])
    mask = x > 2.0
    np.testing.assert_allclose(hax.max(x, where=mask, initial=0.0).array, 5.0)
    with pytest.raises(AxisError, match=r"axes \['D'\] are not in `axes`"):
        hax.sum(x, where=hax.ones(D) > 0)


def test_trace_tril_triu():
    x = hax.random.uniform(jax.random.key(0), (D, H, W))
    np.testing.assert_allclose(hax.trace(x, H, W).array, jnp.trace(x.array, axis1=1, axis2=2))
    assert x.trace("H", "W").axes == (D,)
    low = hax.tril(x, "D", "W", k=1)
    assert low.axes == (H, D, W)
    np.testing.assert_allclose(low.array, jnp.tril(jnp.transpose(x.array, (1, 0, 2)), k=1))
    assert hax.triu(x, H, W).axes == (D, H, W)
    with pytest.raises(AxisError, match="`trace` needs two different axes"):
        hax.trace(x, H, "H")


def test_comparisons_of_whole_arrays():
    x = _values(H, W) + 1.0
    assert hax.allclose(x, x + 1e-6) and not hax.allclose(x, x + 1.0)
    assert hax.array_equal(x, x.rearrange((W, H)))
    assert not hax.array_equal(x, hax.ones(W)) and hax.array_equiv(hax.ones((H, W)), hax.ones(W))
    assert not hax.array_equiv(x, hax.ones(D))


def test_cumulative_and_argsort_along_a_name():
    x = hax.random.uniform(jax.random.key(1), (H, W))
    np.testing.assert_allclose(hax.cumsum(x, "W").array, jnp.cumsum(x.array, axis=1))
    np.testing.assert_allclose(x.cumprod(H).array, jnp.cumprod(x.array, axis=0))
    np.testing.assert_array_equal(hax.argsort(x, "W").array, jnp.argsort(x.array, axis=1))
    np.testing.assert_array_equal(x.argsort(None), jnp.argsort(x.array, axis=None))
    assert isinstance(hax.cumsum(x, W), NamedArray) and hax.cumsum(x, W).axes == (H, W)


def test_named_takes_haliax_keyword_and_unary_functions():
    x = hax.named(jnp.array([0.25, 0.5]), axis="A")
    assert x.axis_names == ("A",)
    for name in ("absolute", "arccos", "arcsin", "arctan", "arctanh", "cbrt", "expm1", "log2"):
        np.testing.assert_allclose(getattr(hax, name)(x).array, getattr(jnp, name)(x.array))
    assert hax.isinf(x / 0.0).array.tolist() == [True, True]


def test_argmax_over_everything_gives_the_flat_index():
    x = _values(H, W)
    assert hax.argmax(x).axes == () and int(hax.argmax(x, None)) == 5
    assert int(hax.argmin(x)) == 0 and hax.argmax(x, "W").axes == (H,)


def test_randint_draws_in_range_with_named_bounds():
    bounds = hax.named(jnp.array([3, 10]), "H")
    draws = hax.random.randint(jax.random.key(0), (H, W), 0, bounds)
    assert draws.axes == (H, W) and jnp.issubdtype(draws.dtype, jnp.integer)
    assert bool((draws.array < bounds.array[:, None]).all() & (draws.array >= 0).all())


def test_updated_slice_scalar_start_and_ragged_starts():
    seq = hax.arange(Axis("Seq", 5))
    out = hax.updated_slice(seq, {"Seq": 2}, hax.named(jnp.array([7, 8]), "Seq"))
    assert out.array.tolist() == [0, 1, 7, 8, 4]
    Batch, Seq, New = Axis("Batch", 2), Axis("Seq", 5), Axis("Seq", 2)
    cache = hax.zeros((Batch, Seq), dtype=jnp.int32)
    lengths = hax.named(jnp.array([1, 3]), Batch)
    block = hax.named(jnp.array([[1, 2], [3, 4]]), (Batch, New))
    ragged = hax.updated_slice(cache, {"Seq": lengths}, block)
    assert ragged.axes == (Batch, Seq)
    assert ragged.array.tolist() == [[0, 1, 2, 0, 0], [0, 0, 0, 3, 4]]
    one_each = hax.updated_slice(cache, {"Seq": lengths}, hax.named(jnp.array([7, 9]), Batch))
    assert one_each.array.tolist() == [[0, 7, 0, 0, 0], [0, 0, 0, 9, 0]]
    # an axis of the array that the update lacks is covered whole
    rows = hax.updated_slice(cache, {"Seq": 4}, hax.ones(Axis("Seq", 1), dtype=jnp.int32))
    assert rows.array[:, 4].tolist() == [1, 1] and int(rows.sum()) == 2
    with pytest.raises(AxisError, match=r"`update` has axes \['New'\] that are not in the"):
        hax.updated_slice(cache, {"Seq": 0}, hax.ones((Batch, Axis("New", 2)), dtype=jnp.int32))
    with pytest.raises(AxisError, match="`update` of size 3 along 'Seq' does not fit from index 4"):
        hax.updated_slice(seq, {"Seq": 4}, hax.arange(Axis("Seq", 3)))
    with pytest.raises(AxisError, match="`start`: axis 'Batch' is not in this array"):
        hax.updated_slice(seq, {"Seq": lengths}, hax.arange(Axis("Seq", 1)))


def test_flatten_unflatten_ravel():
    x = hax.random.uniform(jax.random.key(2), (H, W, D))
    merged = x.flatten_axes((H, D), "Z")
    assert merged.axes == (Axis("Z", 8), W)
    back = hax.unflatten_axis(merged, "Z", (H, D))
    assert back.axes == (H, D, W)
    np.testing.assert_array_equal(back.array, jnp.transpose(x.array, (0, 2, 1)))
    np.testing.assert_array_equal(x.ravel("All").array, jnp.ravel(x.array))
    assert hax.flatten(x, "All").axes == (Axis("All", 24),)
    assert hax.unflatten_axis(hax.ones((Axis("One", 1), W)), "One", ()).axes == (W,)
    with pytest.raises(AxisError, match=r"axis 'Z' of size 8 cannot split into \{'H': 2, 'W': 3\}"):
        hax.unflatten_axis(merged, "Z", (H, W))
    with pytest.raises(AxisError, match=r"must have size 6, the product"):
        hax.flatten_axes(x, (H, W), Axis("Z", 5))


def test_split_repeat_tile_searchsorted():
    x = _values(H, Axis("D", 8))
    first, second = hax.split(x, "D", [D, D])
    assert first.axes == (H, D) and second.axes == (H, D)
    np.testing.assert_array_equal(second.array, x.array[:, 4:])
    with pytest.raises(AxisError, match=r"add up to 7, not to the size 8 of axis 'D'"):
        hax.split(x, "D", [D, D.resize(3)])
    grid = hax.arange((H, W))
    np.testing.assert_array_equal(hax.repeat(grid, 2, "W").array, jnp.repeat(grid.array, 2, 1))
    assert hax.repeat(grid, jnp.array([1, 2]), H).axes == (H.resize(3), W)
    tiled = hax.tile(grid, {"W": 2, "New": 3})
    assert tiled.axes == (Axis("New", 3), H, W.resize(6))
    np.testing.assert_array_equal(tiled.array, jnp.tile(grid.array, (3, 1, 2)))
    ordered = hax.named(jnp.array([1, 3, 5, 7]), "A")
    found = hax.searchsorted(ordered, hax.named(jnp.array([0, 6]), "V"))
    assert found.axes == (Axis("V", 2),) and found.array.tolist() == [0, 3]
    with pytest.raises(AxisError, match="`searchsorted` needs `a` with one axis"):
        hax.searchsorted(grid, 1)


def test_axis_spec_helpers():
    assert hax.axis_spec_to_shape_dict((H, "W")) == {"H": 2, "W": None}
    assert hax.axis_spec_to_shape_dict({"H": 2}) == {"H": 2} and hax.axis_name((H, "W")) == (
        "H",
        "W",
    )
    assert hax.axis_spec_to_tuple({"H": 2, "W": None}) == (H, "W") and hax.axis_name(H) == "H"
    with pytest.raises(AxisError, match="must be an axis name or an Axis"):
        hax.axis_spec_to_shape_dict((H, 3))


@pytest.mark.parametrize(
    ("name", "params", "reference"),
    [
        ("poisson", (2.0,), lambda k, s: jax.random.poisson(k, 2.0, s)),
        ("gamma", (0.5,), lambda k, s: jax.random.gamma(k, 0.5, s)),
        ("beta", (0.6, 0.5), lambda k, s: jax.random.beta(k, 0.6, 0.5, s)),
        ("exponential", (), lambda k, s: jax.random.exponential(k, s)),
        ("gumbel", (), lambda k, s: jax.random.gumbel(k, s)),
        ("t", (3.0,), lambda k, s: jax.random.t(k, 3.0, s)),
        ("truncated_normal", (-1.0, 1.0), lambda k, s: jax.random.truncated_normal(k, -1, 1, s)),
    ],
)
def test_samplers_draw_what_jax_draws(name, params, reference):
    key = jax.random.key(3)
    draws = getattr(hax.random, name)(key, (H, W), *params)
    assert draws.axes == (H, W)
    np.testing.assert_allclose(draws.array, reference(key, (2, 3)), rtol=1e-6)


def test_sampler_parameters_broadcast_by_name():
    key = jax.random.key(4)
    rates = hax.named(jnp.array([1.0, 50.0]), "H")
    draws = hax.random.poisson(key, (W, H), rates)
    assert draws.axes == (W, H)
    np.testing.assert_array_equal(
        draws.array, jax.random.poisson(key, jnp.broadcast_to(rates.array, (3, 2)), (3, 2))
    )
    with pytest.raises(AxisError, match=r"axes \['D'\] are not in `axes`"):
        hax.random.gamma(key, (H,), hax.ones((H, D)))


def test_categorical_choice_permutation_ball():
    key = jax.random.key(5)
    logits = hax.named(jnp.log(jnp.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])), (H, W))
    assert hax.random.categorical(key, logits, "W").array.tolist() == [1, 0]
    wide = hax.random.categorical(key, logits, W, shape=(D, H))
    assert wide.axes == (D, H) and wide.array.tolist() == [[1, 0]] * 4
    with pytest.raises(AxisError, match="cannot hold the category axis 'W'"):
        hax.random.categorical(key, logits, W, shape=(W, H))
    table = _values(H, W)
    picked = hax.random.choice(key, (D,), table, "W", p=hax.named(jnp.array([0.0, 0.0, 1.0]), W))
    assert picked.axes == (D, H) and bool((picked.array == table.array[None, :, 2]).all())
    with pytest.raises(AxisError, match="`p` of `choice` must have exactly the axis 'W'"):
        hax.random.choice(key, (D,), table, "W", p=table)
    shuffled = hax.random.permutation(key, table, "W")
    assert shuffled.axes == (H, W) and sorted(shuffled.array[0].tolist()) == [0.0, 1.0, 2.0]
    points = hax.random.ball(key, (H,), D)
    assert points.axes == (H, D) and bool((jnp.linalg.norm(points.array, axis=1) <= 1.0).all())


def test_where_one_argument_and_nonzero():
    grid = hax.named(jnp.array([[0, 1, 0], [2, 0, 3]]), (H, W))
    Hits = Axis("Hits", 4)
    rows, cols = hax.where(grid > 0, new_axis=Hits, fill_value=-1)
    assert rows.axes == (Hits,) and rows.array.tolist() == [0, 1, 1, -1]
    assert cols.array.tolist() == [1, 0, 2, -1]
    again = hax.nonzero(grid, size=Hits, fill_value=-1)
    assert [a.array.tolist() for a in again] == [[0, 1, 1, -1], [1, 0, 2, -1]]
    with pytest.raises(AxisError, match="needs a NamedArray condition, `new_axis`"):
        hax.where(grid > 0)
    with pytest.raises(AxisError, match="takes both `x` and `y`, or neither"):
        hax.where(grid > 0, grid)


def test_bincount_and_unique():
    X, Bins, U = Axis("X", 6), Axis("Bins", 4), Axis("U", 3)
    x = hax.named(jnp.array([0, 1, 1, 2, 3, 1]), X)
    assert hax.bincount(x, Bins).array.tolist() == [1, 3, 1, 1]
    weights = hax.arange(X, dtype=jnp.float32)
    np.testing.assert_allclose(
        hax.bincount(x, Bins, weights=weights).array, jnp.bincount(x.array, weights.array, length=4)
    )
    with pytest.raises(AxisError, match="`bincount` needs `x` with one axis"):
        hax.bincount(hax.ones((H, W), dtype=jnp.int32), Bins)
    values = hax.named(jnp.array([3, 4, 1, 3, 1]), "V")
    uniq, index, inverse, counts = hax.unique_all(values, U)
    assert uniq.axes == (U,) and uniq.array.tolist() == [1, 3, 4]
    assert index.array.tolist() == [2, 0, 1] and counts.array.tolist() == [2, 2, 1]
    assert inverse.axes == values.axes and inverse.array.tolist() == [1, 2, 0, 1, 0]
    assert hax.unique_values(values, U).array.tolist() == [1, 3, 4]
    rows = hax.named(jnp.array([[1, 2], [2, 3], [1, 2]]), (Axis("R", 3), Axis("C", 2)))
    distinct, inv = hax.unique_inverse(rows, Axis("U", 2), axis="R")
    assert distinct.axes == (Axis("U", 2), Axis("C", 2)) and inv.axes == (Axis("R", 3),)
    assert distinct.array.tolist() == [[1, 2], [2, 3]] and inv.array.tolist() == [0, 1, 0]
    assert hax.unique_counts(rows, Axis("U", 2), axis="R")[1].array.tolist() == [2, 1]
