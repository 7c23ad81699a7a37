"""scan / fold / map over positional axes of plain arrays, and their gradients."""

import jax.numpy as jnp
import numpy as np
import pytest

import bryo_scan
from bryo_scan import ScanAxisError, fold, scan


def _loop(f, init, xs):
    carry, ys = init, []
    for x in xs:
        carry, y = f(carry, x)
        ys.append(y)
    return carry, jnp.stack(ys)


def _step(c, x):
    c = jnp.tanh(c * x + x)
    return c, jnp.sin(c)


def test_scan_matches_loop():
    xs = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)
    carry, ys = scan(_step, 0)(jnp.ones(3), xs)
    want_c, want_y = _loop(_step, jnp.ones(3), xs)
    np.testing.assert_allclose(carry, want_c, rtol=1e-6)
    np.testing.assert_allclose(ys, want_y, rtol=1e-6)


def test_positional_axis_other_than_zero():
    xs = jnp.arange(12.0).reshape(3, 4)
    total = fold(lambda c, x: c + x, 1)(jnp.zeros(3), xs)
    np.testing.assert_allclose(total, xs.sum(axis=1))


def test_reverse():
    xs = jnp.arange(4.0)
    carry, ys = scan(lambda c, x: (c * 10 + x, c), 0, reverse=True)(0.0, xs)
    assert float(carry) == 3210.0
    assert ys.tolist() == [321.0, 32.0, 3.0, 0.0]


def test_map_and_vmap():
    xs = jnp.arange(6.0).reshape(3, 2)
    np.testing.assert_allclose(bryo_scan.map(lambda x: x.sum(), 0)(xs), xs.sum(1))
    np.testing.assert_allclose(bryo_scan.vmap(lambda x: x.sum(), 1)(xs), xs.sum(0))


def test_static_leaves_reach_every_step():
    xs = {"x": jnp.arange(3.0), "scale": 2.0, "fn": jnp.square}
    out = fold(lambda c, x: c + x["fn"](x["x"]) * x["scale"], 0)(0.0, xs)
    assert float(out) == 2.0 * (0 + 1 + 4)


def test_errors():
    with pytest.raises(
        ScanAxisError,
        match=r"`length` argument of 3 .* b has leading dimension 4 \(array of shape \(4,\)\)"
        r".* first scanned input: a has leading dimension 3",
    ):
        fold(lambda c, a, b: c, 0)(0.0, jnp.ones(3), jnp.ones(4))
    with pytest.raises(ScanAxisError, match="cannot tell how many steps"):
        scan(lambda c, _: (c, c), 0)(0.0, None)
    with pytest.raises(ScanAxisError, match="not an axis spec"):
        scan(lambda c, _: (c, c), 1.5)(0.0, jnp.ones(3))
    with pytest.raises(TypeError, match="must return a pair"):
        scan(lambda c, x: c + x, 0)(0.0, jnp.ones(3))
    with pytest.raises(ScanAxisError, match="does not exist"):
        fold(lambda c, x: c, 2)(0.0, jnp.ones((2, 2)))
