"""`Embed`: a table of `num_embeddings` vectors of size `features`, looked up by index."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from bryo_graph import Param

from . import initializers
from ._common import RngsArg, params_key, promote_dtype
from ._module import Module

default_embed_init = initializers.variance_scaling(1.0, "fan_in", "normal", out_axis=0)


class Embed(Module):
    """Look up rows of `embedding` (shape `(num_embeddings, features)`) by integer index.

    >>> embed = Embed(10, 4, rngs=Rngs(0))       # doctest: +SKIP
    >>> embed(jnp.array([1, 2])).shape             # doctest: +SKIP
    (2, 4)

    Args:
        num_embeddings: the number of rows.
        features: the size of each row.
        dtype: dtype of the looked-up vectors (default: the parameter's).
        param_dtype: dtype of the table.
        embedding_init: initializer of the table (from the `params` stream).
        rngs: the `Rngs` that initialises the table.
    """

    def __init__(
        self,
        num_embeddings: int,
        features: int,
        *,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        embedding_init: initializers.Initializer = default_embed_init,
        rngs: RngsArg,
    ) -> None:
        self.embedding = Param(
            embedding_init(params_key(rngs, "Embed"), (num_embeddings, features), param_dtype)
        )
        self.num_embeddings = num_embeddings
        self.features = features
        self.dtype = dtype
        self.param_dtype = param_dtype

    def __call__(self, inputs: jax.Array) -> jax.Array:
        if not jnp.issubdtype(jnp.asarray(inputs).dtype, jnp.integer):
            raise TypeError(
                f"Embed takes integer indices; got dtype {jnp.asarray(inputs).dtype}. Cast "
                "them (`x.astype(jnp.int32)`), or use `embed.attend(query)` for vectors."
            )
        (table,) = promote_dtype(self.dtype or self.embedding.value.dtype, self.embedding.value)
        return jnp.take(table, inputs, axis=0)

    def attend(self, query: jax.Array) -> jax.Array:
        """`query @ embedding.T`: similarities to every row (tied output projections)."""
        query, table = promote_dtype(self.dtype, query, self.embedding.value)
        return jnp.dot(query, table.T)
