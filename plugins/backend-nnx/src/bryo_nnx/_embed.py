"""`Embed`: a table of `num_embeddings` vectors of size `features`, looked up by index."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import jax
import jax.numpy as jnp

from . import dtypes, initializers
from ._common import NO_METADATA, Metadata, OutSharding, RngsArg, init_param
from ._linear import contraction_kwargs
from ._module import Module

_TakeRows = Callable[[jax.Array, jax.Array], jax.Array]

default_embed_init = initializers.default_embed_init


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
        promote_dtype: casts `(table,)` for lookups and `(query, table)` for `attend`
            (`bryo_nnx.dtypes.promote_dtype` or a function with its signature).
        rngs: the `Rngs` that initialises the table.
        embedding_metadata: metadata of the `embedding` Param.
    """

    def __init__(
        self,
        num_embeddings: int,
        features: int,
        *,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        embedding_init: initializers.Initializer = default_embed_init,
        promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
        rngs: RngsArg,
        embedding_metadata: Metadata = NO_METADATA,
    ) -> None:
        self.embedding = init_param(
            embedding_init,
            rngs,
            "Embed",
            (num_embeddings, features),
            param_dtype,
            embedding_metadata,
        )
        self.num_embeddings = num_embeddings
        self.features = features
        self.dtype = dtype or self.embedding[...].dtype
        self.param_dtype = param_dtype
        self.promote_dtype = promote_dtype

    def __call__(self, inputs: jax.Array, out_sharding: OutSharding | None = None) -> jax.Array:
        """The rows of `inputs` (integer indices); `out_sharding` (a `PartitionSpec`, under
        a mesh of Explicit axes) is the sharding of the result."""
        if not jnp.issubdtype(jnp.asarray(inputs).dtype, jnp.integer):
            raise ValueError(
                f"Embed takes integer indices; got dtype {jnp.asarray(inputs).dtype}. Cast "
                "them (`x.astype(jnp.int32)`), or use `embed.attend(query)` for vectors."
            )
        (table,) = self.promote_dtype((self.embedding[...],), dtype=self.dtype, inexact=False)
        if self.num_embeddings == 1:
            return jnp.broadcast_to(table, (*inputs.shape, self.features))
        if out_sharding is not None:  # `jnp.take` has no `out_sharding`: run it in auto mode
            # auto_axes(f, ...) is f run in auto mode (the checker also sees its f=None branch)
            take = cast(_TakeRows, jax.sharding.auto_axes(_take_rows, out_sharding=out_sharding))
            return take(table, inputs)
        return _take_rows(table, inputs)

    def attend(self, query: jax.Array, out_sharding: OutSharding | None = None) -> jax.Array:
        """`query @ embedding.T`: similarities to every row (tied output projections);
        `out_sharding` as in `__call__`."""
        query, table = self.promote_dtype((query, self.embedding[...]), dtype=self.dtype)
        return jnp.dot(query, table.T, **contraction_kwargs(None, out_sharding))


def _take_rows(table: jax.Array, indices: jax.Array) -> jax.Array:
    return jnp.take(table, indices, axis=0)
