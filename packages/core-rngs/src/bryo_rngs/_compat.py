"""JAX APIs whose spelling differs across the supported versions (JAX 0.7 through 0.10)."""

from __future__ import annotations

import jax.extend.core as _jex_core


def current_trace() -> object:
    """An opaque token of the JAX trace running now; tokens of one trace compare equal.

    `jax.extend.core.get_opaque_trace_state` exists in every supported JAX (0.7+); the
    `convention` argument names the caller's convention and is ignored by JAX.
    """
    return _jex_core.get_opaque_trace_state(convention="nnx")
