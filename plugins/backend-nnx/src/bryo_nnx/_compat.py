"""What differs across the supported JAX versions (0.7 to the newest), in one place."""

from __future__ import annotations

from typing import Any


def cost_flops(lowered: Any) -> int:
    """The estimated FLOPs of a `jax.jit(...).lower(...)` result, 0 if XLA gives none.

    `cost_analysis()` returns a dict in current JAX and a one-element list of dicts in
    some older versions; the lowered module may have none before compilation.
    """
    cost = lowered.cost_analysis() or lowered.compile().cost_analysis()
    if isinstance(cost, list | tuple):
        cost = cost[0] if cost else None
    return int(cost.get("flops", 0)) if cost else 0
