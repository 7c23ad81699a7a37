"""Typed PRNG key arrays (`jax.random.key`) in a MoX: printed, evaluated, rewritten."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_mox import MoxError, eval_mox, make_mox, sub
from bryo_mox.document import decode, encode, parse_type, storage_layout, to_document, type_str

KEY = jax.random.key(3)


def noisy(x):
    return x + jax.random.normal(KEY, x.shape)  # a key closed over: a constant


def keyed(key, x):
    return x + jax.random.uniform(key, x.shape), jax.random.split(key)[0]


def seeded(seed, x):
    data = jax.random.key_data(jax.random.key(seed))
    key = jax.random.fold_in(jax.random.wrap_key_data(data), 1)
    return x * jax.random.uniform(key, x.shape)


def key_data(tree):
    return jax.tree_util.tree_map(
        lambda a: jax.random.key_data(a) if jnp.issubdtype(a.dtype, jax.dtypes.prng_key) else a,
        tree,
    )


@pytest.mark.parametrize(
    ("fun", "args"),
    [(noisy, (jnp.ones(3),)), (keyed, (KEY, jnp.ones(3))), (seeded, (jnp.int32(2), jnp.ones(3)))],
)
def test_keys_print_and_evaluate(fun, args):
    mox = make_mox(fun)(*args)
    text = str(mox)
    assert "key<fry>[]" in text
    expected = key_data(fun(*args))
    for got in (eval_mox(mox, *args), jax.jit(lambda *a: eval_mox(mox, *a))(*args)):
        for a, b in zip(jax.tree.leaves(key_data(got)), jax.tree.leaves(expected), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6)
    to_document(mox)  # writable: no error


def test_key_constant_stored_as_key_data():
    doc = to_document(make_mox(noisy)(jnp.ones(3)))
    (const,) = doc.consts
    assert const.type == "key<fry>[]"
    assert const.data.dtype == np.uint32 and const.data.shape == (2,)
    np.testing.assert_array_equal(const.data, jax.random.key_data(KEY))


def test_key_types_parse():
    for text, data in [("key<fry>[3]", (3, 2)), ("key<threefry2x32>[]", (2,))]:
        aval = parse_type(text)
        assert jnp.issubdtype(aval.dtype, jax.dtypes.prng_key)
        assert storage_layout(aval) == (np.dtype(np.uint32), data)
    assert type_str(parse_type("key<rbg>[2,1]")) == "key<rbg>[2,1]"
    with pytest.raises(MoxError, match="unknown PRNG implementation"):
        parse_type("key<nope>[]")


def test_prng_impl_params_encode():
    closed = jax.make_jaxpr(lambda s: jax.random.key(s))(0)
    impl = closed.jaxpr.eqns[0].params["impl"]
    text = encode(impl)
    assert text == "prng_impl('threefry2x32')"
    assert decode(text) == impl
    assert decode(encode(KEY.dtype)) == KEY.dtype
    with pytest.raises(MoxError):
        decode("prng_impl('nope')")


def test_sub_keeps_key_wiring(toy):
    mox = make_mox(keyed)(KEY, jnp.ones(3))
    new = sub("/mox/add", make_mox(lambda a, b: a - b)(jnp.ones(3), jnp.ones(3)), mox)
    got, key = eval_mox(new, KEY, jnp.ones(3))
    np.testing.assert_allclose(got, 1.0 - jax.random.uniform(KEY, (3,)), rtol=1e-6)
    assert key.dtype == KEY.dtype
