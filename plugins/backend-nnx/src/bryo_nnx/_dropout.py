"""`Dropout`: zero a random fraction `rate` of the inputs, scale the rest by `1 / (1 - rate)`.

Masks come from the `dropout` stream (or `rng_collection`): of the `rngs` passed at call
time (explicit style), or of the stream the layer forked from the `rngs` it was built with
(implicit style, seed 002). `deterministic=True`, or `model.eval()`, turns it off.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax import lax

from bryo_rngs import RngStream

from ._common import RngsArg, call_key, first_given, fork_stream
from ._compat import bernoulli
from ._module import Module


def dropout(
    inputs: jax.Array, rate: float, key: jax.Array, broadcast_dims: Sequence[int] = ()
) -> jax.Array:
    """Inputs with a fraction `rate` zeroed (one mask value shared along `broadcast_dims`)."""
    if rate == 0.0:
        return inputs
    if rate == 1.0:
        return jnp.zeros_like(inputs)
    keep = 1.0 - rate
    shape = list(inputs.shape)
    for dim in broadcast_dims:
        shape[dim] = 1
    # The mask takes the inputs' sharding: `select` refuses differently sharded operands
    # under a mesh of Explicit axes.
    sharding = jax.typeof(inputs).sharding
    mask = bernoulli(key, keep, tuple(shape), sharding)
    mask = jnp.broadcast_to(mask, inputs.shape)
    return lax.select(mask, inputs / keep, jnp.zeros_like(inputs))


class Dropout(Module):
    """Randomly zero inputs during training.

    >>> from bryo_rngs import Rngs
    >>> x = jnp.ones((2, 3))
    >>> drop = Dropout(0.5, rngs=Rngs(dropout=1))   # implicit: keeps its own stream
    >>> y = drop(x)
    >>> y = Dropout(0.5)(x, rngs=Rngs(dropout=1))    # explicit: rngs at call time

    Args:
        rate: the probability of zeroing each element (0 <= rate <= 1).
        broadcast_dims: axes along which one mask value is shared.
        deterministic: if True, return the inputs unchanged (`model.eval()` sets it); None
            makes every call say.
        rng_collection: the stream to draw masks from.
        rngs: optional; the layer keeps a stream forked from `rngs[rng_collection]`.
    """

    def __init__(
        self,
        rate: float,
        *,
        broadcast_dims: Sequence[int] = (),
        deterministic: bool | None = False,
        rng_collection: str = "dropout",
        rngs: RngsArg | None = None,
    ) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"`rate` of Dropout must be in [0, 1]; got {rate}.")
        self.rate = rate
        self.broadcast_dims = tuple(broadcast_dims)
        self.deterministic = deterministic
        self.rng_collection = rng_collection
        self.rngs: RngStream | None = (
            None if rngs is None else fork_stream(rngs, rng_collection, "Dropout")
        )

    def set_view(self, deterministic: bool | None = None) -> None:
        """Used by `nnx.view`.

        Args:
            deterministic: if True, return the inputs unchanged.
        """
        if deterministic is not None:
            self.deterministic = deterministic

    def __call__(
        self,
        inputs: jax.Array,
        *,
        deterministic: bool | None = None,
        rngs: RngsArg | jax.Array | None = None,
    ) -> jax.Array:
        """Apply dropout; `deterministic` and `rngs` override the layer's for this call."""
        deterministic = first_given(
            deterministic, self.deterministic, layer="Dropout", name="deterministic"
        )
        if deterministic or self.rate == 0.0:
            return inputs
        key = call_key(rngs, self.rngs, self.rng_collection, "Dropout")
        return dropout(inputs, self.rate, key, self.broadcast_dims)
