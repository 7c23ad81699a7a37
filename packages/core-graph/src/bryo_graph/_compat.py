"""What differs across the supported JAX versions (0.7 to the newest), in one place."""

from __future__ import annotations

import jax

# `jax.Ref`, the type of `jax.new_ref(...)` (a mutable array), is public in JAX 0.10; where
# a version has no public name for it, tree mode sees no refs (none can be made publicly).
_REF_TYPES: tuple[type, ...] = tuple(t for t in (getattr(jax, "Ref", None),) if t is not None)


def is_ref(value: object) -> bool:
    """Whether `value` is a JAX mutable array (`jax.new_ref(...)`), on any supported JAX."""
    return isinstance(value, _REF_TYPES)
