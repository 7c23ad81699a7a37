"""What differs across the supported JAX versions (0.7 to the newest), in one place."""

from __future__ import annotations

import inspect
from typing import Any

import jax


def cost_flops(lowered: Any) -> int:
    """The estimated FLOPs of a `jax.jit(...).lower(...)` result, 0 if XLA gives none.

    `cost_analysis()` returns a dict in current JAX and a one-element list of dicts in
    some older versions; the lowered module may have none before compilation.
    """
    cost = lowered.cost_analysis() or lowered.compile().cost_analysis()
    if isinstance(cost, list | tuple):
        cost = cost[0] if cost else None
    return int(cost.get("flops", 0)) if cost else 0


# `jax.random.bernoulli(..., out_sharding=)` is newer than jax 0.7.2 (whose bernoulli has
# no such keyword): there the mask is drawn unsharded and resharded like the inputs.
_BERNOULLI_OUT_SHARDING = "out_sharding" in inspect.signature(jax.random.bernoulli).parameters


def bernoulli(key: jax.Array, p: float, shape: tuple[int, ...], sharding: Any) -> jax.Array:
    """`jax.random.bernoulli(key, p, shape)` with `out_sharding=sharding` where JAX takes it."""
    if _BERNOULLI_OUT_SHARDING:
        return jax.random.bernoulli(key, p, shape, out_sharding=sharding)
    mask = jax.random.bernoulli(key, p, shape)
    if any(getattr(sharding, "spec", ())):  # inputs sharded over (explicit) mesh axes
        mask = jax.sharding.reshard(mask, sharding)
    return mask
