"""What differs across the supported JAX versions (0.7 to the newest), in one place."""

from __future__ import annotations

import jax
from jax.core import Tracer

# `jax.Ref` (the type of `jax.new_ref(...)`, a mutable array) and `jax.new_ref` are public
# from JAX 0.7.2, the oldest bryo supports. A traced ref is a Tracer whose abstract value
# is an `AbstractRef`: public as `jax.experimental.hijax.AbstractRef` from JAX 0.8; JAX
# 0.7 has it only in `jax._src.state.types`. (`isinstance(x, jax.Ref)` also sees traced
# refs from JAX 0.8 on, but costs microseconds: too slow for `Variable.get_value`.)
try:
    from jax.experimental.hijax import AbstractRef as _AbstractRef
except ImportError:  # JAX 0.7
    from jax._src.state.types import AbstractRef as _AbstractRef  # type: ignore[no-redef]  # JAX 0.7's only spelling

_REF = jax.Ref
new_ref = jax.new_ref


def is_ref(value: object) -> bool:
    """Whether `value` is a JAX mutable array (`jax.new_ref(...)`), concrete or traced
    (Flax's `is_array_ref`), on every supported JAX.

    >>> import jax
    >>> is_ref(jax.new_ref(1.0)), is_ref(jax.numpy.ones(2))
    (True, False)
    """
    cls = type(value)
    return cls is _REF or (
        issubclass(cls, Tracer) and isinstance(value.aval, _AbstractRef)  # type: ignore[attr-defined]  # a Tracer
    )


is_array_ref = is_ref  # Flax's name, exported by `bryo_graph`
