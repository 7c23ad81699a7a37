"""JAX APIs whose spelling differs across the supported versions (JAX 0.7 through 0.10)."""

from __future__ import annotations

import jax.extend.core as _jex_core


def current_trace() -> object:
    """An opaque token of the JAX trace running now; tokens of one trace compare equal.

    The `convention` argument names the caller's convention and is ignored by JAX.
    """
    return _get_opaque_trace_state(convention="nnx")


# JAX 0.7 has `get_opaque_trace_state` in `jax.core` only (where Flax 0.12.0 calls it); later
# releases export it from `jax.extend.core`, the long-lived spelling.
if hasattr(_jex_core, "get_opaque_trace_state"):
    _get_opaque_trace_state = _jex_core.get_opaque_trace_state
else:  # JAX 0.7
    import jax.core

    _get_opaque_trace_state = jax.core.get_opaque_trace_state
