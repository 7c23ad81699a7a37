"""Which inputs a scan, fold, map or vmap splits (`is_scanned`), and how size mismatches
name the argument at fault."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bryo_scan
from bryo_pytree import pytree_dataclass
from bryo_scan import ScanAxisError, ScanOutputError, fold, scan


def test_scalars_reach_every_step_unchanged():
    xs = jnp.arange(4.0)
    seen = []

    def step(carry, x, scale, offset):
        seen.append((np.shape(scale), type(offset)))
        return carry + x * scale + offset, None

    carry, _ = scan(step, 0)(0.0, xs, jnp.asarray(2.0), 1)
    assert float(carry) == 2 * 6 + 4
    assert seen == [((), int)]  # the 0-d array and the int were not sliced


def test_is_scanned_picks_the_inputs():
    xs, table = jnp.arange(3.0), jnp.arange(3) * 10
    # default: both arrays are scanned
    assert float(fold(lambda c, x, t: c + x * t.astype(x.dtype), 0)(0.0, xs, table)) == 0 + 10 + 40
    # a predicate: the integer `table` is passed whole to every step
    floats = lambda leaf: jnp.issubdtype(leaf.dtype, jnp.floating)
    total = fold(lambda c, x, t: c + x * t.sum().astype(x.dtype), 0, is_scanned=floats)(
        0.0, xs, table
    )
    assert float(total) == 30.0 * 3
    # True: every array, so a 0-d one is an error naming it
    with pytest.raises(ScanAxisError, match=r"scale: positional axis 0 does not exist .*\(\)"):
        fold(lambda c, x, scale: c + x * scale, 0, is_scanned=True)(0.0, xs, jnp.asarray(2.0))
    # False: nothing is scanned, so there is no length
    with pytest.raises(ScanAxisError, match=r"no input is scanned .* left out by `is_scanned`"):
        fold(lambda c, x: c, 0, is_scanned=False)(0.0, xs)


def test_map_takes_is_mapped():
    table = jnp.arange(3.0)
    out = bryo_scan.map(lambda x, t: x + t.sum(), 0, is_mapped=lambda leaf: leaf.shape == (2,))(
        jnp.ones(2), table
    )
    np.testing.assert_allclose(out, [4.0, 4.0])


def test_bad_is_scanned_is_a_type_error():
    with pytest.raises(TypeError, match="`is_scanned` must be True, False, a predicate"):
        scan(lambda c, x: (c, x), 0, is_scanned="yes")
    with pytest.raises(TypeError, match="`is_mapped` must be"):
        bryo_scan.map(lambda x: x, 0, is_mapped=3)


@pytree_dataclass
class Pair:
    first: jax.Array
    second: jax.Array


def test_mismatch_names_the_argument_as_the_function_does():
    def step(carry, xs, *rest, y):
        return carry, None

    good, bad = jnp.zeros((2, 3)), jnp.zeros((1, 3))
    with pytest.raises(ValueError, match="y has leading dimension 1") as info:
        fold(step, 0)(0, good, y=bad)
    assert isinstance(info.value, ScanAxisError)
    assert "scan got `length` argument of 2 but some inputs had different leading" in str(
        info.value
    )
    with pytest.raises(ScanAxisError, match=r"rest\[1\]\.second has leading dimension 1"):
        fold(step, 0)(0, good, good, Pair(good, bad), y=good)
    with pytest.raises(ScanAxisError, match=r"xs\['w'\] has leading dimension 1"):
        fold(step, 0)(0, {"w": bad, "b": good}, y=good)


def test_mismatch_along_another_positional_axis():
    with pytest.raises(ScanAxisError, match=r"b has size 4 along positional axis 1"):
        fold(lambda c, a, b: c, 1)(0.0, jnp.ones((2, 3)), jnp.ones((2, 4)))


def test_a_function_that_returns_no_pair_is_a_value_and_type_error():
    with pytest.raises(ScanOutputError, match=r"must return a pair .*Use `fold`") as info:
        scan(lambda c, x: c + x, 0)(0.0, jnp.ones(3))
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)


def test_vmap_over_several_axes_nests_them_outermost_first():
    x = jnp.arange(24.0).reshape(2, 3, 4)
    out = bryo_scan.vmap(lambda row: row.sum(), (0, 0))(x)
    np.testing.assert_allclose(out, x.sum(-1))
    out = bryo_scan.vmap(lambda col: col.sum(), [0, 1])(x)  # inner maps (3, 4)'s axis 1
    np.testing.assert_allclose(out, x.sum(1))
    assert bryo_scan.vmap(jnp.sum, ())(x) == x.sum()


def test_vmap_leaves_scalars_alone():
    out = bryo_scan.vmap(lambda x, s: x * s, 0)(jnp.arange(3.0), jnp.asarray(2.0))
    np.testing.assert_allclose(out, [0.0, 2.0, 4.0])


@dataclasses.dataclass(frozen=True)
class Accumulate:
    """A callable object: its `__call__` names the arguments in errors."""

    def __call__(self, carry, x, weights):
        return carry + x, x


def test_callable_objects_are_named_by_their_call():
    carry, ys = scan(Accumulate(), 0)(0.0, jnp.arange(3.0), jnp.ones(3))
    assert float(carry) == 3.0 and ys.shape == (3,)
    with pytest.raises(ScanAxisError, match=r"weights has leading dimension 1"):
        scan(Accumulate(), 0)(0.0, jnp.ones(2), jnp.ones(1))
