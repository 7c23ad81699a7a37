"""bryo's one answer to "is this an array?", in three nested sizes.

- `is_array`: a JAX array (tracers included), a NumPy array or a NumPy scalar. What every
  package maps, scans, traces and stores as an array.
- `is_array_like`: `is_array`, or a Python `bool`/`int`/`float`/`complex`: what JAX
  traces when it is passed as an argument (`jax.typing.ArrayLike`); the lifted
  transforms trace these.
- `is_shaped`: anything with an array's `shape` and `dtype` that is not a class: arrays,
  `jax.ShapeDtypeStruct`s from `eval_shape`, a backend's own array type (a NamedArray).
  A graph keeps such raw attributes of its nodes in the State, and displays describe them
  by shape and dtype.

When JAX adds an array type, this module is the one place to teach bryo about it.
"""

from __future__ import annotations

from typing import TypeGuard

import jax
import numpy as np

_ARRAY_TYPES = (jax.Array, np.ndarray, np.generic)
_PY_NUMBERS = frozenset({bool, int, float, complex})


def is_array(value: object) -> TypeGuard[jax.Array | np.ndarray | np.generic]:
    """Whether `value` is a JAX array (or tracer), a NumPy array or a NumPy scalar.

    >>> is_array(jnp.ones(2)), is_array(np.float32(1)), is_array(1.0)
    (True, True, False)
    """
    return isinstance(value, _ARRAY_TYPES)


def is_array_like(value: object) -> bool:
    """Whether JAX traces `value` as an argument: `is_array`, or a Python number.

    >>> is_array_like(1.0), is_array_like(True), is_array_like("a")
    (True, True, False)
    """
    return type(value) in _PY_NUMBERS or isinstance(value, _ARRAY_TYPES)


def is_shaped(value: object) -> bool:
    """Whether `value` has an array's `shape` and `dtype` (and is not a class such as
    `jnp.float32`): arrays, `jax.ShapeDtypeStruct`s, a backend's array type.

    >>> is_shaped(jax.ShapeDtypeStruct((2,), jnp.float32)), is_shaped(jnp.float32)
    (True, False)
    """
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, type)
