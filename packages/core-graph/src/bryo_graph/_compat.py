"""What differs across the supported JAX versions (0.7 to the newest), in one place."""

from __future__ import annotations

from collections.abc import Callable

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


# The JAX trace running now, as a token that stays the same object for one trace (a weak
# reference to it, which keeps no trace alive): what Flax's `TraceState` compares. JAX
# keeps it in `jax._src.core.trace_state` (22 ns to read); the public
# `get_opaque_trace_state` wraps the same reference in a new object on every call (0.3 us),
# too slow for every attribute write, so it is only the fallback where the private one is
# missing or differs.
def _public_trace_token() -> object:
    return _opaque_trace_state(convention="nnx")._trace_ref  # type: ignore[attr-defined]  # OpaqueTraceState


try:
    from jax.extend.core import get_opaque_trace_state as _opaque_trace_state
except ImportError:  # JAX 0.7 has it in `jax.core` only
    from jax.core import get_opaque_trace_state as _opaque_trace_state  # type: ignore[no-redef, attr-defined]  # JAX 0.7's spelling

try:
    from jax._src.core import trace_state as _trace_state

    _fast_trace_token: Callable[[], object] = lambda: _trace_state.value
    if _fast_trace_token() is not _public_trace_token():
        raise ImportError("jax._src.core.trace_state is not the opaque trace state")
except (ImportError, AttributeError):
    _fast_trace_token = _public_trace_token

current_trace: Callable[[], object] = _fast_trace_token
"""The JAX trace running now, as a token: one trace's tokens are the same object (compare
with `is`, or `==` where they may come from different JAX calls)."""
