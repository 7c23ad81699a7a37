"""Pooling functions: the same numbers as Flax's `flax.linen.pooling` (which `flax.nnx`
re-exports) for every layout, padding and stride; integer inputs; errors that name the
argument."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from bryo_nnx import avg_pool, max_pool, min_pool, pool

linen_pooling = pytest.importorskip("flax.linen.pooling")

IMAGES = jax.random.normal(jax.random.key(0), (2, 5, 6, 3))  # batch, height, width, features
SEQUENCE = jax.random.normal(jax.random.key(1), (7, 2))  # no batch axis: length, features
STACKED = jax.random.normal(jax.random.key(2), (2, 3, 6, 2))  # two batch axes, 1-d window

CASES = [
    (IMAGES, (2, 2), None, "VALID"),
    (IMAGES, (3, 2), (2, 1), "SAME"),
    (IMAGES, (2, 3), (1, 2), ((1, 0), (2, 1))),
    (SEQUENCE, (3,), (2,), "SAME"),
    (SEQUENCE, (2,), None, ((1, 1),)),
    (STACKED, (4,), (2,), "VALID"),
    (STACKED, (3,), None, "SAME"),
]


@pytest.mark.parametrize(("inputs", "window", "strides", "padding"), CASES)
def test_max_and_min_pool_equal_flax(inputs, window, strides, padding):
    for ours, theirs in ((max_pool, linen_pooling.max_pool), (min_pool, linen_pooling.min_pool)):
        expected = theirs(inputs, window, strides=strides, padding=padding)
        result = ours(inputs, window, strides=strides, padding=padding)
        np.testing.assert_array_equal(result, expected)


@pytest.mark.parametrize(("inputs", "window", "strides", "padding"), CASES)
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool_equals_flax(inputs, window, strides, padding, count_include_pad):
    with jax.numpy_dtype_promotion("standard"):  # Flax divides by numpy's int64 window size
        expected = linen_pooling.avg_pool(
            inputs, window, strides=strides, padding=padding, count_include_pad=count_include_pad
        )
    result = avg_pool(
        inputs, window, strides=strides, padding=padding, count_include_pad=count_include_pad
    )
    np.testing.assert_array_equal(result, expected)


def test_pool_with_a_custom_reduction_equals_flax():
    expected = linen_pooling.pool(IMAGES, 1.0, lax.mul, (2, 2), (1, 1), "SAME")
    np.testing.assert_array_equal(pool(IMAGES, 1.0, lax.mul, (2, 2), (1, 1), "SAME"), expected)


def test_avg_pool_without_padding_counts_only_real_positions():
    ones = jnp.ones((1, 3, 1))
    padded = avg_pool(ones, (3,), padding="SAME", count_include_pad=False)
    np.testing.assert_array_equal(padded, jnp.ones((1, 3, 1)))
    counted = avg_pool(ones, (3,), padding="SAME")  # the padded zeros count
    np.testing.assert_allclose(counted[0, :, 0], [2 / 3, 1.0, 2 / 3])


def test_max_and_min_pool_take_integers_and_padding_never_wins():
    ints = jnp.array([[[-5], [-7], [-6]]], jnp.int32)
    assert max_pool(ints, (2,), padding="SAME")[0, :, 0].tolist() == [-5, -6, -6]
    assert min_pool(-ints, (2,), padding="SAME")[0, :, 0].tolist() == [5, 6, 6]
    assert max_pool(ints, (2,)).dtype == jnp.int32


def test_pool_is_jittable_and_differentiable_where_the_reduction_is():
    grads = jax.grad(lambda x: avg_pool(x, (2, 2)).sum())(IMAGES)
    assert grads.shape == IMAGES.shape
    np.testing.assert_array_equal(
        jax.jit(max_pool, static_argnums=1)(IMAGES, (2, 2)), max_pool(IMAGES, (2, 2))
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: max_pool(IMAGES, 2), "`window_shape` must be a sequence of ints"),
        (lambda: max_pool(IMAGES, (2, 2), strides=(1,)), "`strides` .* one stride per window"),
        (lambda: avg_pool(IMAGES, (2, 2), padding=((1, 1),)), "`padding` must be 'SAME'"),
        (lambda: min_pool(IMAGES, (2, 2), padding=((1, 1, 1), (0, 0))), "one `\\(low, high\\)`"),
        (lambda: max_pool(jnp.ones((4, 4)), (2, 2)), r"shape \(4, 4\) has too few axes"),
        (lambda: max_pool(IMAGES, (2.0, 2)), "`window_shape` must be a sequence of ints"),
    ],
)
def test_bad_windows_fail_naming_the_argument(call, message):
    with pytest.raises((TypeError, ValueError), match=message):
        call()


def test_the_facade_exports_the_pooling_functions():
    from bryo import nnx

    assert (nnx.avg_pool, nnx.max_pool, nnx.min_pool, nnx.pool) == (
        avg_pool,
        max_pool,
        min_pool,
        pool,
    )
