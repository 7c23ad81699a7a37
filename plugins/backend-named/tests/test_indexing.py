"""Indexing by name as in Haliax: NamedArrays of integer indices (advanced indexing, with
Haliax's rules for where the index axes go), `ds`/`dslice` dynamic slices, and the
functional updates of `x.at[...]`. Checked against the installed `haliax`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bryo_named as hax
from bryo_named import Axis, AxisError, NamedArray, ds

hx = pytest.importorskip("haliax")  # the reference these tests compare with

H, W, D, C = hax.make_axes(H=3, W=4, D=5, C=2)


def _values(*axes):
    return hax.arange(axes, dtype=jnp.float32)


def _to_haliax(x):
    if isinstance(x, NamedArray):
        return hx.NamedArray(x.array, tuple(hx.Axis(a.name, a.size) for a in x.axes))
    if isinstance(x, hax.dslice):
        return hx.ds(x.start, x.size)
    return x


def _same_as_haliax(ours, theirs):
    assert ours.axis_names == tuple(a.name for a in theirs.axes)
    np.testing.assert_array_equal(ours.array, theirs.array)


def _index_both(x, index):
    ours = x[index]
    theirs = _to_haliax(x)[{k: _to_haliax(v) for k, v in index.items()}]
    _same_as_haliax(ours, theirs)
    return ours


def test_named_index_array_replaces_the_axis_in_place():
    x = _values(H, W, D)
    picks = NamedArray(jnp.array([2, 0, 1, 1, 0]), {"Pick": 5})
    out = _index_both(x, {"H": picks})
    assert out.shape == {"Pick": 5, "W": 4, "D": 5}
    np.testing.assert_array_equal(out.array, x.array[picks.array])
    assert _index_both(x, {"H": picks, "W": 0}).axis_names == ("Pick", "D")


def test_index_axes_go_in_front_when_the_indexed_axes_are_not_adjacent():
    x = _values(H, W, D, C)
    I1, I2 = Axis("I1", 2), Axis("I2", 3)
    first = hax.random.randint(jax.random.key(0), (I2,), 0, W.size)
    second = hax.random.randint(jax.random.key(1), (I1, I2), 0, C.size)
    # adjacent (W, D): in place; apart (W, C): in front, as NumPy does
    assert _index_both(x, {"W": first, "D": 1}).axis_names == ("H", "I2", "C")
    assert _index_both(x, {"W": first, "C": second}).axis_names == ("I1", "I2", "H", "D")


def test_index_axis_shared_with_the_array_pairs_element_by_element():
    x = _values(H, W)
    per_row = NamedArray(jnp.array([3, 0, 2]), {"H": 3})  # one W position per H row
    out = _index_both(x, {"W": per_row})
    assert out.shape == {"H": 3}
    np.testing.assert_array_equal(out.array, x.array[jnp.arange(3), per_row.array])


def test_unnamed_one_dimensional_index_keeps_the_axis_name():
    x = _values(H, W)
    out = x["W", jnp.array([3, 1])]
    assert out.shape == {"H": 3, "W": 2}
    np.testing.assert_array_equal(out.array, x.array[:, jnp.array([3, 1])])
    assert x["W", [0, 0, 1]].shape == {"H": 3, "W": 3}


def test_index_function_and_traced_indices_under_jit():
    x = _values(H, W)
    picks = NamedArray(jnp.array([1, 2]), {"Pick": 2})
    np.testing.assert_array_equal(hax.index(x, {"W": picks}).array, x.array[:, picks.array])
    f = jax.jit(lambda i: x["H", i])
    np.testing.assert_array_equal(f(jnp.array([0, 2])).array, x.array[jnp.array([0, 2])])
    assert f(jnp.array(1)).shape == {"W": 4}


def test_dslice_reads_fill_past_the_end_and_writes_there_drop():
    x = hax.arange(Axis("Seq", 5), dtype=jnp.int32)
    read = _index_both(x, {"Seq": ds(3, 4)})
    assert read.array.tolist() == [3, 4, 0, 0]
    written = x.at["Seq", ds(3, 4)].set(NamedArray(jnp.array([7, 8, 9, 10]), {"Seq": 4}))
    assert written.array.tolist() == [0, 1, 2, 7, 8]
    assert hax.dblock(1, 2).start == 2 and ds(0, Axis("Seq", 3)).size == 3


def test_dslice_with_a_traced_start_under_jit():
    x = _values(H, W)
    f = jax.jit(lambda start: x["W", ds(start, 2), "H", ds(start, 2)])
    out = f(jnp.array(1))
    assert out.axis_names == ("H", "W")  # both indexed: Haliax's order for two dslices
    np.testing.assert_array_equal(out.array, x.array[1:3, 1:3])
    g = jax.jit(lambda d: x[{"W": d}])  # a dslice is a pytree: its start is traced
    np.testing.assert_array_equal(g(ds(jnp.array(2), 2)).array, x.array[:, 2:4])


def test_two_dslices_order_as_haliax():
    x = _values(H, W, D)
    _index_both(x, {"H": ds(0, 2), "D": ds(1, 3)})
    _index_both(x, {"H": ds(1, 2), "D": slice(1, 4)})
    _index_both(x, {"H": ds(1, 2), "D": 3})


_SCATTERS = ["set", "add", "multiply", "mul", "divide", "power", "min", "max"]


@pytest.mark.parametrize("method", _SCATTERS)
def test_at_updates_match_haliax(method):
    x = _values(H, W) + 1.0
    update = NamedArray(jnp.array([2.0, 3.0, 4.0]), {"H": 3})  # broadcast over W's selection
    index = {"W": slice(1, 3)}
    ours = getattr(x.at[index], method)(update)
    theirs = getattr(_to_haliax(x).at[index], method)(_to_haliax(update))
    _same_as_haliax(ours, theirs)


def test_at_with_index_arrays_get_and_apply():
    x = _values(H, W)
    picks = NamedArray(jnp.array([0, 0, 2]), {"Pick": 3})
    added = x.at["H", picks].add(1.0)  # repeated indices all apply, as in JAX
    np.testing.assert_array_equal(added.array, x.array.at[picks.array].add(1.0))
    got = x.at["H", picks].get()
    assert got.shape == {"Pick": 3, "W": 4}
    np.testing.assert_array_equal(got.array, x.array[picks.array])
    np.testing.assert_array_equal(
        x.at["W", 1].apply(jnp.negative).array, x.array.at[:, 1].apply(jnp.negative)
    )
    out_of_range = x.at["H", NamedArray(jnp.array([5]), {"Pick": 1})]
    assert jnp.all(out_of_range.get(mode="fill", fill_value=-1.0).array == -1.0)


def test_at_leaves_the_original_unchanged_and_works_under_grad():
    x = _values(H, W)
    before = np.asarray(x.array).copy()
    x.at["H", 0].set(100.0)
    np.testing.assert_array_equal(x.array, before)
    grad = jax.grad(lambda v: hax.sum(x.at["H", 1].set(v * 2.0)).scalar())(jnp.float32(1.0))
    assert grad == 2.0 * W.size


@pytest.mark.parametrize(
    ("mistake", "message"),
    [
        (lambda x: x["H", 0, "H", 1], r"axis 'H' is indexed twice"),
        (lambda x: x["Batch", 0], r"`index`: axis 'Batch' is not in this array"),
        (lambda x: x["H", NamedArray(jnp.ones(2), {"P": 2})], r"axis 'H'.*integers.*float32"),
        (
            lambda x: x["H", jnp.zeros((2, 2), jnp.int32)],
            r"axis 'H'.*unnamed array of shape \(2, 2\)",
        ),
        (lambda x: x["H", "first"], r"axis 'H': cannot index by 'first'"),
        (
            lambda x: x["W", 1:3, "H", NamedArray(jnp.zeros(4, jnp.int32), {"W": 4})],
            r"axis 'W' is sliced and also an axis of an index array",
        ),
        (
            lambda x: x["H", NamedArray(jnp.zeros(3, jnp.int32), {"W": 3})],
            r"axis 'W' has size 3 in an index array but 4 in the array",
        ),
        (lambda x: x.at["H", 0].set(_values(D)), r"the update's axis 'D' is not an axis"),
        (lambda x: x.at["H", 0:2].set(_values(H)), r"axis 'H' has size 3 in the update but 2"),
        (lambda x: x.at["H", 0].set(1.0, mode="drop", axis=0), r"take the keywords"),
        (lambda x: jax.jit(lambda n: ds(0, n))(2), r"`length` of a dslice must be a static int"),
    ],
)
def test_bad_indices_say_what_and_where(mistake, message):
    x = _values(H, W)
    before = np.asarray(x.array).copy()
    with pytest.raises((AxisError, TypeError), match=message):
        mistake(x)
    np.testing.assert_array_equal(x.array, before)


_POOL = {"H": 3, "W": 4, "D": 2}


@st.composite
def _indices(draw):
    index = {}
    for name, size in _POOL.items():
        kind = draw(st.sampled_from(["keep", "int", "slice", "array", "ds"]))
        if kind == "int":
            index[name] = draw(st.integers(-size, size - 1))
        elif kind == "slice":
            start = draw(st.integers(0, size - 1))
            index[name] = slice(start, draw(st.integers(start, size)), draw(st.integers(1, 2)))
        elif kind == "ds":
            index[name] = ds(draw(st.integers(0, size - 1)), draw(st.integers(1, size)))
        elif kind == "array":
            axes = draw(st.lists(st.sampled_from(["I", "J"]), unique=True, max_size=2))
            shape = {a: {"I": 2, "J": 3}[a] for a in axes}
            values = draw(st.lists(st.integers(0, size - 1), min_size=6, max_size=6))
            flat = np.array(values[: int(np.prod(list(shape.values()) or [1]))], np.int32)
            index[name] = NamedArray(jnp.asarray(flat.reshape(tuple(shape.values()))), shape)
    return index


@settings(max_examples=40, deadline=None)
@given(index=_indices())
def test_every_mix_of_selectors_matches_haliax(index):
    x = hax.arange(tuple(Axis(n, s) for n, s in _POOL.items()), dtype=jnp.int32)
    _index_both(x, index)
    if index:  # and writing the selection back through `at` reproduces the array
        np.testing.assert_array_equal(x.at[index].set(x[index]).array, x.array)
