"""Memory is given back: what bryo_mox caches for a MoX dies with it, and `clear_caches`
empties the caches shared between MoXes (checked with weak references, not RSS)."""

import gc
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bryo_mox
from bryo_mox import _eval, _load, _view, dumps, eval_mox, loads, make_mox, query

X = jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)


def traced_over_large_arrays():
    """A MoX of a function closing over two arrays: one a constant of the MoX, one inside
    a jitted function's jaxpr; and weak references to both arrays."""
    outer = jnp.full((4, 4), 2.0)
    inner = jnp.full((4, 4), 3.0)
    jitted = jax.jit(lambda x: jnp.tanh(x @ inner))
    mox = make_mox(lambda x: jitted(x @ outer) + 1.0)(X)
    return mox, [weakref.ref(outer), weakref.ref(inner)]


def use_every_way(mox):
    expected = np.asarray(eval_mox(mox, X))
    np.testing.assert_allclose(jax.jit(lambda x: eval_mox(mox, x))(X), expected, rtol=1e-6)
    jax.grad(lambda x: eval_mox(mox, x).sum())(X)
    jax.vmap(lambda x: eval_mox(mox, x))(jnp.stack([X, X]))
    assert len(query("//jit", mox)) == 1
    for fmt in ("xml", "yson"):
        pytest.importorskip(f"bryo_{fmt}")
        back = loads(dumps(mox, format=fmt), format=fmt)
        np.testing.assert_allclose(eval_mox(back, X), expected, rtol=1e-6)


def test_a_deleted_mox_frees_its_arrays_and_its_cache_entries():
    gc.collect()
    cached_before = len(_eval._singles)
    mox, arrays = traced_over_large_arrays()
    use_every_way(mox)
    assert len(_eval._singles) > cached_before
    node = weakref.ref(mox)
    del mox
    gc.collect()
    assert node() is None
    assert [array() for array in arrays] == [None, None]
    assert len(_eval._singles) == cached_before


def test_clear_caches_empties_the_shared_caches_and_changes_no_result():
    mox, _ = traced_over_large_arrays()
    use_every_way(mox)
    assert len(_load.TRACES) > 0 and _view.compile_xpath.cache_info().currsize > 0
    assert len(_eval._singles) > 0
    bryo_mox.clear_caches()
    assert len(_load.TRACES) == 0 and _view.compile_xpath.cache_info().currsize == 0
    assert len(_eval._singles) == 0
    use_every_way(mox)  # filled again, same results
