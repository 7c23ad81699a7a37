"""Random NamedArrays: `random.normal(key, {"Time": 100, "Features": 16})`.

Haliax's `haliax.random` over `jax.random`: each sampler takes a named `shape`, and its
parameters may be scalars or NamedArrays, broadcast to `shape` by name (a parameter with
an axis `shape` lacks is an error).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from ._axis import Axis, AxisError, AxisSelector, Shape, axes_of, format_axes
from ._named_array import NamedArray
from ._ops import broadcast_axis, broadcast_to
from ._rearrange import reorder

__all__ = [
    "ball",
    "bernoulli",
    "beta",
    "categorical",
    "cauchy",
    "choice",
    "exponential",
    "gamma",
    "gumbel",
    "laplace",
    "loggamma",
    "logistic",
    "normal",
    "pareto",
    "permutation",
    "poisson",
    "rademacher",
    "randint",
    "t",
    "truncated_normal",
    "uniform",
    "weibull_min",
]


def _sample(shape: Shape, draw: Callable[..., Any], *params: Any) -> NamedArray:
    """`draw(sizes, *params)` with each parameter broadcast to `shape` by name."""
    axes = axes_of(shape)
    raw = [broadcast_to(p, axes).array if isinstance(p, NamedArray) else p for p in params]
    return NamedArray._wrap(draw(tuple(a.size for a in axes), *raw), axes)


def normal(key: jax.Array, shape: Shape, dtype: Any = jnp.float32) -> NamedArray:
    """Standard normal samples with the given named `shape`."""
    return _sample(shape, lambda s: jax.random.normal(key, s, dtype))


def uniform(
    key: jax.Array, shape: Shape, dtype: Any = jnp.float32, minval: Any = 0.0, maxval: Any = 1.0
) -> NamedArray:
    """Uniform samples in `[minval, maxval)` with the given named `shape`."""
    return _sample(
        shape, lambda s, lo, hi: jax.random.uniform(key, s, dtype, lo, hi), minval, maxval
    )


def bernoulli(key: jax.Array, shape: Shape, p: Any = 0.5) -> NamedArray:
    """Boolean samples, True with probability `p`, with the given named `shape`."""
    return _sample(shape, lambda s, q: jax.random.bernoulli(key, q, s), p)


def randint(key: jax.Array, shape: Shape, minval: Any, maxval: Any, dtype: Any = int) -> NamedArray:
    """Integers in `[minval, maxval)` with the given named `shape`."""
    return _sample(
        shape, lambda s, lo, hi: jax.random.randint(key, s, lo, hi, dtype), minval, maxval
    )


def poisson(key: jax.Array, shape: Shape, lam: Any, dtype: Any = int) -> NamedArray:
    """Poisson samples with rate `lam`."""
    return _sample(shape, lambda s, rate: jax.random.poisson(key, rate, s, dtype), lam)


def gamma(key: jax.Array, shape: Shape, a: Any, dtype: Any = jnp.float32) -> NamedArray:
    """Gamma samples with shape parameter `a`."""
    return _sample(shape, lambda s, alpha: jax.random.gamma(key, alpha, s, dtype), a)


def loggamma(key: jax.Array, shape: Shape, a: Any, dtype: Any = jnp.float32) -> NamedArray:
    """Log-gamma samples with shape parameter `a`."""
    return _sample(shape, lambda s, alpha: jax.random.loggamma(key, alpha, s, dtype), a)


def beta(key: jax.Array, shape: Shape, a: Any, b: Any, dtype: Any = jnp.float32) -> NamedArray:
    """Beta samples with parameters `a`, `b`."""
    return _sample(shape, lambda s, x, y: jax.random.beta(key, x, y, s, dtype), a, b)


def truncated_normal(
    key: jax.Array, shape: Shape, lower: Any, upper: Any, dtype: Any = jnp.float32
) -> NamedArray:
    """Standard normal samples truncated to `[lower, upper]`."""
    return _sample(
        shape, lambda s, lo, hi: jax.random.truncated_normal(key, lo, hi, s, dtype), lower, upper
    )


def t(key: jax.Array, shape: Shape, df: Any, dtype: Any = jnp.float32) -> NamedArray:
    """Student's t samples with `df` degrees of freedom."""
    return _sample(shape, lambda s, d: jax.random.t(key, d, s, dtype), df)


def pareto(key: jax.Array, shape: Shape, b: Any, dtype: Any = jnp.float32) -> NamedArray:
    """Pareto samples with shape parameter `b`."""
    return _sample(shape, lambda s, x: jax.random.pareto(key, x, s, dtype), b)


def weibull_min(
    key: jax.Array, shape: Shape, scale: Any, concentration: Any, dtype: Any = jnp.float32
) -> NamedArray:
    """Weibull samples with `scale` and `concentration`."""
    return _sample(
        shape,
        lambda s, lam, k: jax.random.weibull_min(key, lam, k, s, dtype),
        scale,
        concentration,
    )


def _standard(name: str) -> Callable[..., NamedArray]:
    draw = getattr(jax.random, name)

    def sampler(key: jax.Array, shape: Shape, dtype: Any = jnp.float32) -> NamedArray:
        return _sample(shape, lambda s: draw(key, s, dtype))

    sampler.__name__ = sampler.__qualname__ = name
    sampler.__doc__ = f"`jax.random.{name}` samples with the given named `shape`."
    return sampler


exponential = _standard("exponential")
laplace = _standard("laplace")
cauchy = _standard("cauchy")
logistic = _standard("logistic")
gumbel = _standard("gumbel")
rademacher = _standard("rademacher")


def ball(
    key: jax.Array, shape: Shape, D: Axis, p: float = 2.0, dtype: Any = jnp.float32
) -> NamedArray:
    """Points uniform in the `p`-norm unit ball of dimension `D` (an axis after `shape`)."""
    axes = (*axes_of(shape), D)
    points = jax.random.ball(key, D.size, p, tuple(a.size for a in axes[:-1]), dtype)
    return NamedArray(points, axes)


def choice(
    key: jax.Array,
    shape: Shape,
    a: NamedArray,
    axis: AxisSelector,
    replace: bool = True,
    p: NamedArray | None = None,
) -> NamedArray:
    """Elements of `a` drawn along its `axis` (with weights `p` over that axis): the result
    has the axes `shape` then `a`'s other axes."""
    position = a.position_of(axis, "axis")
    if p is not None and p.axis_names != (a.axes[position].name,):
        raise AxisError(
            f"`p` of `choice` must have exactly the axis {a.axes[position].name!r}; "
            f"got {format_axes(p.axes)}."
        )
    drawn = axes_of(shape)
    weights = None if p is None else p.array
    picked = jax.random.choice(
        key, a.array, tuple(x.size for x in drawn), replace, weights, position
    )
    # JAX puts the drawn axes where `axis` was; Haliax documents them in front
    spliced = NamedArray(picked, (*a.axes[:position], *drawn, *a.axes[position + 1 :]))
    return reorder(spliced, (*drawn, ...))


def categorical(
    key: jax.Array, logits: NamedArray, axis: AxisSelector, shape: Shape | None = None
) -> NamedArray:
    """Category indices along `axis` of `logits` (unnormalized log probabilities): one
    draw per element of `shape` (default: the other axes of `logits`, which `shape` must
    include)."""
    category = logits.resolve_axis(axis)
    axes = (
        tuple(a for a in logits.axes if a.name != category.name)
        if shape is None
        else axes_of(shape)
    )
    if any(a.name == category.name for a in axes):
        raise AxisError(
            f"`shape` of `categorical` cannot hold the category axis {category.name!r}."
        )
    spread = broadcast_axis(logits, axes)
    position = spread.position_of(category)
    draws = jax.random.categorical(
        key, spread.array, axis=position, shape=tuple(a.size for a in axes)
    )
    return NamedArray(draws, axes)


def permutation(
    key: jax.Array, x: NamedArray, axis: AxisSelector, independent: bool = False
) -> NamedArray:
    """`x` shuffled along the named `axis`."""
    position = x.position_of(axis, "axis")
    return NamedArray._wrap(jax.random.permutation(key, x.array, position, independent), x.axes)
