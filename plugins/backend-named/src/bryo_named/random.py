"""Random NamedArrays: `random.normal(key, {"Time": 100, "Features": 16})`.

Thin wrappers over `jax.random` that take a shape with named axes.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ._axis import Shape, axes_of
from ._named_array import NamedArray, raw_operand

__all__ = ["bernoulli", "normal", "randint", "uniform"]


def normal(key: jax.Array, shape: Shape, dtype: Any = jnp.float32) -> NamedArray:
    """Standard normal samples with the given named `shape`."""
    axes = axes_of(shape)
    return NamedArray._wrap(jax.random.normal(key, tuple(a.size for a in axes), dtype), axes)


def uniform(
    key: jax.Array, shape: Shape, dtype: Any = jnp.float32, minval: Any = 0.0, maxval: Any = 1.0
) -> NamedArray:
    """Uniform samples in `[minval, maxval)` with the given named `shape`."""
    axes = axes_of(shape)
    low, high = (raw_operand(v, axes, "uniform") for v in (minval, maxval))
    return NamedArray._wrap(
        jax.random.uniform(key, tuple(a.size for a in axes), dtype, low, high), axes
    )


def bernoulli(key: jax.Array, shape: Shape, p: Any = 0.5) -> NamedArray:
    """Boolean samples, True with probability `p`, with the given named `shape`."""
    axes = axes_of(shape)
    return NamedArray._wrap(
        jax.random.bernoulli(key, raw_operand(p, axes, "bernoulli"), tuple(a.size for a in axes)),
        axes,
    )


def randint(key: jax.Array, shape: Shape, minval: Any, maxval: Any, dtype: Any = int) -> NamedArray:
    """Integers in `[minval, maxval)` with the given named `shape` (bounds may be named)."""
    axes = axes_of(shape)
    low, high = (raw_operand(v, axes, "randint") for v in (minval, maxval))
    return NamedArray._wrap(
        jax.random.randint(key, tuple(a.size for a in axes), low, high, dtype), axes
    )
