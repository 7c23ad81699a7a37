"""Flax Linen for the bridge, imported here once, with an error that says how to get it.

`bryo_nnx` itself never imports Flax: only `bryo_nnx.bridge` (and `bryo.nnx.bridge`) do.
"""

MISSING_FLAX = (
    "`bryo.nnx.bridge` wraps Flax Linen modules and needs Flax: `pip install flax` "
    "(or `pip install 'bryo-backend-nnx[bridge]'`)."
)

try:
    from flax import linen as linen
    from flax import struct as struct
    from flax.core import FrozenDict as FrozenDict
    from flax.core import meta as meta
except ImportError as error:  # pragma: no cover - Flax is installed in the test envs
    raise ImportError(MISSING_FLAX) from error


def current_linen_module() -> linen.Module | None:
    """The Linen module whose method is running on this thread, if any.

    Flax keeps this stack privately (`flax.linen.module._context`, Flax 0.12); its own
    bridge reads it the same way to inherit the caller's `mutable` collections.
    """
    stack = linen.module._context.module_stack  # type: ignore[attr-defined]  # Flax-private, stable across 0.12.x
    return stack[-1] if stack else None
