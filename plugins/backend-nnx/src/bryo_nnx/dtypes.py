"""Dtype promotion for layers: `canonicalize_dtype` and `promote_dtype` (Flax's `nnx.nn.dtypes`).

Every layer casts its inputs and parameters to one computation dtype before it computes:
the `dtype=` it was built with, or else the common result type of the arrays, made
inexact (integer inputs compute in `float32`). Layers take a `promote_dtype=` keyword
with this function's signature, so a caller can change the rule (e.g. keep `bfloat16`
activations with `float32` parameters):

    >>> x, kernel = promote_dtype((jnp.ones(2, jnp.int32), jnp.ones(2)), dtype=None)
    >>> x.dtype, kernel.dtype
    (dtype('float32'), dtype('float32'))
"""

from __future__ import annotations

from typing import Protocol, TypeVar

import jax.numpy as jnp
from jax.typing import DTypeLike

from ._common import standard_result_type

T = TypeVar("T", bound=tuple)


class PromoteDtypeFn(Protocol):
    """What a layer's `promote_dtype=` keyword takes: `promote_dtype` or a function like it."""

    def __call__(
        self, args: T, /, *, dtype: DTypeLike | None = None, inexact: bool = True
    ) -> T: ...


def canonicalize_dtype(
    *args: object, dtype: DTypeLike | None = None, inexact: bool = True
) -> jnp.dtype:
    """The dtype `args` compute in: `dtype` if given, else their common result type.

    Args:
        *args: arrays or scalars; None values are ignored.
        dtype: the dtype to use instead of inferring one.
        inexact: the result must be a floating or complex dtype; an inferred integer or
            boolean type is promoted with `float32`.

    Returns:
        The dtype.

    Raises:
        ValueError: `dtype` was given, `inexact` is True, and `dtype` is not inexact.
    """
    if dtype is None:
        # Promoting is this function's job: by JAX's standard rules, also when a test
        # suite runs under `jax_numpy_dtype_promotion="strict"`.
        dtype = standard_result_type(*(jnp.asarray(a) for a in args if a is not None))
        if inexact and not jnp.issubdtype(dtype, jnp.inexact):
            dtype = standard_result_type(jnp.float32, dtype)
    if inexact and not jnp.issubdtype(dtype, jnp.inexact):
        raise ValueError(
            f"`dtype` must be a floating or complex dtype here; got {jnp.dtype(dtype).name}."
        )
    return jnp.dtype(dtype)


def promote_dtype(args: T, /, *, dtype: DTypeLike | None = None, inexact: bool = True) -> T:
    """`args` (a tuple) cast to one dtype, chosen by `canonicalize_dtype`; Nones stay None."""
    target = canonicalize_dtype(*args, dtype=dtype, inexact=inexact)
    return tuple(None if a is None else jnp.asarray(a, target) for a in args)  # type: ignore[return-value]  # the same tuple shape as `args` (T), each entry cast
