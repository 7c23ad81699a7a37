"""Pooling over windows of an input's spatial axes: `pool`, `avg_pool`, `max_pool`, `min_pool`.

The inputs are laid out as Flax's pooling functions expect them: `(batch..., window
dims..., features)`, where the window covers the axes between the batch axes and the last
(feature) axis; an input without batch axes is pooled as a batch of one. Every function is
one `lax.reduce_window` (two for `avg_pool(count_include_pad=False)`), so the numbers
equal Flax's. Bad window, stride or padding specifications fail up front, naming the
argument.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

Padding = str | Sequence[tuple[int, int]]


def _as_ints(name: str, value: Sequence[int]) -> tuple[int, ...]:
    if isinstance(value, int) or not all(isinstance(n, (int, np.integer)) for n in value):
        raise TypeError(
            f"`{name}` must be a sequence of ints, one per window axis, got {value!r}; "
            f"write e.g. `{name}=(2, 2)` for a 2-d window."
        )
    return tuple(int(n) for n in value)


def _window_pads(padding: Padding, window: tuple[int, ...]) -> str | tuple[tuple[int, int], ...]:
    if isinstance(padding, str):
        return padding
    pairs = [tuple(pair) for pair in padding]
    if len(pairs) != len(window) or any(len(pair) != 2 for pair in pairs):
        raise ValueError(
            f"`padding` must be 'SAME', 'VALID' or one `(low, high)` pair per window axis "
            f"({len(window)} for window_shape={window}), got {padding!r}."
        )
    return tuple((int(low), int(high)) for low, high in pairs)


def pool(
    inputs: jax.Array,
    init: object,
    reduce_fn: Callable[[jax.Array, jax.Array], jax.Array],
    window_shape: Sequence[int],
    strides: Sequence[int] | None,
    padding: Padding,
) -> jax.Array:
    """Reduces each window of `inputs` with `reduce_fn`, starting from `init`.

    Args:
        inputs: an array laid out as `(batch..., window dims..., features)`.
        init: the reduction's initial value (0 for a sum, -inf for a maximum).
        reduce_fn: a binary reduction `(T, T) -> T`, such as `lax.add`.
        window_shape: the window's size along each window axis.
        strides: the step between windows along each window axis (None: all 1).
        padding: 'SAME', 'VALID', or one `(low, high)` pair per window axis.

    Returns:
        The reduction of every window; batch and feature axes keep their sizes.
    """
    window = _as_ints("window_shape", window_shape)
    steps = (1,) * len(window) if strides is None else _as_ints("strides", strides)
    if len(steps) != len(window):
        raise ValueError(
            f"`strides` {steps} must give one stride per window axis, as window_shape={window}."
        )
    pads = _window_pads(padding, window)
    batch_axes = inputs.ndim - len(window) - 1
    if batch_axes < 0:
        raise ValueError(
            f"an input of shape {inputs.shape} has too few axes for window_shape={window}: "
            "pooling needs `(batch..., window dims..., features)`, at least "
            f"{len(window) + 1} axes."
        )
    single = batch_axes == 0
    operand = inputs[None] if single else inputs
    lead = (1,) * max(batch_axes, 1)
    if not isinstance(pads, str):
        pads = ((0, 0),) * len(lead) + pads + ((0, 0),)
    result = lax.reduce_window(
        operand, init, reduce_fn, lead + window + (1,), lead + steps + (1,), pads
    )
    return result[0] if single else result


def _extreme(dtype: jnp.dtype, largest: bool) -> object:
    """The identity of max (`largest=False`) or min (`largest=True`) pooling for `dtype`."""
    if jnp.issubdtype(dtype, jnp.integer):
        info = jnp.iinfo(dtype)
        return info.max if largest else info.min
    if jnp.issubdtype(dtype, jnp.bool_):
        return largest
    return jnp.inf if largest else -jnp.inf


def avg_pool(
    inputs: jax.Array,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: Padding = "VALID",
    count_include_pad: bool = True,
) -> jax.Array:
    """The average over each window (as `flax.nnx.avg_pool`).

    Args:
        inputs: an array laid out as `(batch..., window dims..., features)`.
        window_shape: the window's size along each window axis.
        strides: the step between windows along each window axis (None: all 1).
        padding: 'SAME', 'VALID', or one `(low, high)` pair per window axis.
        count_include_pad: whether padded positions count in the average's divisor.

    Returns:
        The average of every window.

    Example:
        >>> import jax.numpy as jnp
        >>> from bryo_nnx import avg_pool
        >>> avg_pool(jnp.arange(4.0).reshape(1, 4, 1), (2,), strides=(2,))[0, :, 0]
        Array([0.5, 2.5], dtype=float32)
    """
    sums = pool(inputs, 0.0, lax.add, window_shape, strides, padding)
    if count_include_pad:
        return sums / math.prod(_as_ints("window_shape", window_shape))
    # Count the real positions in each window: pool ones of the input's shape without its
    # features (and with one batch row when there is exactly one batch axis).
    counts_shape = (*inputs.shape[:-1], 1)
    if len(counts_shape) - 2 == len(window_shape):
        counts_shape = (1, *counts_shape[1:])
    ones = jnp.ones(counts_shape, sums.dtype)
    return sums / pool(ones, 0.0, lax.add, window_shape, strides, padding)


def max_pool(
    inputs: jax.Array,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: Padding = "VALID",
) -> jax.Array:
    """The maximum of each window (as `flax.nnx.max_pool`).

    Args:
        inputs: an array laid out as `(batch..., window dims..., features)`.
        window_shape: the window's size along each window axis.
        strides: the step between windows along each window axis (None: all 1).
        padding: 'SAME', 'VALID', or one `(low, high)` pair per window axis.

    Returns:
        The maximum of every window (padding never wins).
    """
    init = _extreme(inputs.dtype, largest=False)
    return pool(inputs, init, lax.max, window_shape, strides, padding)


def min_pool(
    inputs: jax.Array,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: Padding = "VALID",
) -> jax.Array:
    """The minimum of each window (as `flax.nnx.min_pool`).

    Args:
        inputs: an array laid out as `(batch..., window dims..., features)`.
        window_shape: the window's size along each window axis.
        strides: the step between windows along each window axis (None: all 1).
        padding: 'SAME', 'VALID', or one `(low, high)` pair per window axis.

    Returns:
        The minimum of every window (padding never wins).
    """
    init = _extreme(inputs.dtype, largest=True)
    return pool(inputs, init, lax.min, window_shape, strides, padding)
