"""Attention: `dot_product_attention`, the mask helpers, and `MultiHeadAttention`.

Arrays are laid out `(*batch, length, num_heads, head_dim)`; masks and attention weights
`(*batch, num_heads, q_length, kv_length)`. Dropout on the attention weights draws from
the `dropout` stream, like `Dropout` (explicit `rngs=` at call, or a stream forked at
construction).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from bryo_rngs import RngStream

from . import initializers
from ._common import RngsArg, call_key, first_not_none, fork_stream, promote_dtype
from ._dropout import dropout
from ._linear import LinearGeneral, default_bias_init, default_kernel_init
from ._module import Module
from ._normalization import LayerNorm


def dot_product_attention_weights(
    query: jax.Array,
    key: jax.Array,
    bias: jax.Array | None = None,
    mask: jax.Array | None = None,
    broadcast_dropout: bool = True,
    dropout_rng: jax.Array | None = None,
    dropout_rate: float = 0.0,
    deterministic: bool = False,
    dtype: jnp.dtype | None = None,
    precision: lax.Precision | None = None,
) -> jax.Array:
    """`softmax(q·k / sqrt(head_dim) + bias, masked)`, with dropout on the weights.

    Args:
        query: `(*batch, q_length, num_heads, head_dim)`.
        key: `(*batch, kv_length, num_heads, head_dim)`.
        bias, mask: broadcastable to `(*batch, num_heads, q_length, kv_length)`; `mask`
            is True where attention is allowed.
        broadcast_dropout: one dropout mask for all batch entries and heads.
        dropout_rng: the dropout key (needed when `dropout_rate > 0` and not deterministic).
        dropout_rate, deterministic: dropout on the weights.
        dtype, precision: computation dtype and einsum precision.

    Returns:
        The weights, `(*batch, num_heads, q_length, kv_length)`.
    """
    query, key = promote_dtype(dtype, query, key)
    query = query / jnp.sqrt(query.shape[-1]).astype(query.dtype)
    weights = jnp.einsum("...qhd,...khd->...hqk", query, key, precision=precision)
    if bias is not None:
        weights = weights + bias
    if mask is not None:
        weights = jnp.where(mask, weights, jnp.finfo(weights.dtype).min)
    weights = jax.nn.softmax(weights, axis=-1)
    if dropout_rate > 0.0 and not deterministic:
        if dropout_rng is None:
            raise ValueError(
                "`dropout_rng` is needed for attention dropout (`dropout_rate` > 0 and not "
                "`deterministic`)."
            )
        dims = tuple(range(weights.ndim - 2)) if broadcast_dropout else ()
        weights = dropout(weights, dropout_rate, dropout_rng, dims)
    return weights


def dot_product_attention(
    query: jax.Array,
    key: jax.Array,
    value: jax.Array,
    bias: jax.Array | None = None,
    mask: jax.Array | None = None,
    broadcast_dropout: bool = True,
    dropout_rng: jax.Array | None = None,
    dropout_rate: float = 0.0,
    deterministic: bool = False,
    dtype: jnp.dtype | None = None,
    precision: lax.Precision | None = None,
) -> jax.Array:
    """Attention output `(*batch, q_length, num_heads, head_dim)`: the weights of
    `dot_product_attention_weights` (same arguments) applied to `value`."""
    weights = dot_product_attention_weights(
        query,
        key,
        bias,
        mask,
        broadcast_dropout,
        dropout_rng,
        dropout_rate,
        deterministic,
        dtype,
        precision,
    )
    (value,) = promote_dtype(weights.dtype, value)
    return jnp.einsum("...hqk,...khd->...qhd", weights, value, precision=precision)


def make_attention_mask(
    query_input: jax.Array,
    key_input: jax.Array,
    pairwise_fn: Callable[[jax.Array, jax.Array], jax.Array] = jnp.multiply,
    dtype: jnp.dtype = jnp.float32,
) -> jax.Array:
    """A `(*batch, 1, q_length, kv_length)` mask from per-position query and key flags."""
    mask = pairwise_fn(query_input[..., :, None], key_input[..., None, :])
    return mask[..., None, :, :].astype(dtype)


def make_causal_mask(x: jax.Array, dtype: jnp.dtype = jnp.float32) -> jax.Array:
    """A `(*batch, 1, length, length)` mask letting each position attend to itself and before."""
    positions = jnp.broadcast_to(jnp.arange(x.shape[-1]), x.shape)
    return make_attention_mask(positions, positions, jnp.greater_equal, dtype)


def combine_masks(*masks: jax.Array | None, dtype: jnp.dtype = jnp.float32) -> jax.Array | None:
    """The logical AND of the masks that are not None (None if all are)."""
    present = [m for m in masks if m is not None]
    if not present:
        return None
    mask = present[0]
    for other in present[1:]:
        mask = jnp.logical_and(mask, other)
    return mask.astype(dtype)


class MultiHeadAttention(Module):
    """Multi-head dot-product attention with learned query/key/value/output projections.

    >>> mha = MultiHeadAttention(4, 16, dropout_rate=0.1, rngs=Rngs(0))    # doctest: +SKIP
    >>> mha(x, rngs=Rngs(dropout=1)).shape                                  # doctest: +SKIP

    Args:
        num_heads: the number of heads; `qkv_features` must be divisible by it.
        in_features: the size of the last axis of the query input.
        qkv_features: the total size of queries, keys and values (default `in_features`).
        out_features: the size of the output's last axis (default `in_features`).
        in_kv_features: the size of the key/value inputs' last axis (default `in_features`).
        dtype, param_dtype, precision: as `Linear`.
        broadcast_dropout: one dropout mask for all batch entries and heads.
        dropout_rate: dropout on the attention weights, from the `dropout` stream.
        deterministic: the default for calls (`model.eval()` sets True, `train()` False).
        kernel_init, out_kernel_init, bias_init, out_bias_init, use_bias: projections.
        attention_fn: `dot_product_attention` or a function with its signature.
        normalize_qk: apply a `LayerNorm` to queries and keys (per head).
        rngs: initialises the projections (`params`); with `dropout_rate > 0` the layer
            also keeps a stream forked from `rngs['dropout']` for calls without `rngs=`.
    """

    def __init__(
        self,
        num_heads: int,
        in_features: int,
        qkv_features: int | None = None,
        out_features: int | None = None,
        in_kv_features: int | None = None,
        *,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        broadcast_dropout: bool = True,
        dropout_rate: float = 0.0,
        deterministic: bool | None = None,
        precision: lax.Precision | None = None,
        kernel_init: initializers.Initializer = default_kernel_init,
        out_kernel_init: initializers.Initializer | None = None,
        bias_init: initializers.Initializer = default_bias_init,
        out_bias_init: initializers.Initializer | None = None,
        use_bias: bool = True,
        attention_fn: Callable[..., jax.Array] = dot_product_attention,
        normalize_qk: bool = False,
        rngs: RngsArg,
    ) -> None:
        qkv_features = first_not_none(qkv_features, in_features)  # type: ignore[assignment]
        out_features = first_not_none(out_features, in_features)  # type: ignore[assignment]
        in_kv_features = first_not_none(in_kv_features, in_features)  # type: ignore[assignment]
        if qkv_features % num_heads:  # type: ignore[operator]
            raise ValueError(
                f"MultiHeadAttention: `qkv_features`={qkv_features} must be divisible by "
                f"`num_heads`={num_heads}."
            )
        head_dim = qkv_features // num_heads  # type: ignore[operator]
        common = dict(dtype=dtype, param_dtype=param_dtype, precision=precision, use_bias=use_bias)

        def projection(features_in: int) -> LinearGeneral:
            return LinearGeneral(
                features_in,
                (num_heads, head_dim),
                kernel_init=kernel_init,
                bias_init=bias_init,
                rngs=rngs,
                **common,
            )

        self.query = projection(in_features)
        self.key = projection(in_kv_features)  # type: ignore[arg-type]
        self.value = projection(in_kv_features)  # type: ignore[arg-type]
        self.out = LinearGeneral(
            (num_heads, head_dim),
            out_features,
            axis=(-2, -1),  # type: ignore[arg-type]
            kernel_init=out_kernel_init or kernel_init,
            bias_init=out_bias_init or bias_init,
            rngs=rngs,
            **common,
        )
        if normalize_qk:
            self.query_ln = LayerNorm(
                head_dim, use_bias=False, dtype=dtype, param_dtype=param_dtype, rngs=rngs
            )
            self.key_ln = LayerNorm(
                head_dim, use_bias=False, dtype=dtype, param_dtype=param_dtype, rngs=rngs
            )
        else:
            self.query_ln = self.key_ln = None
        self.rngs: RngStream | None = (
            fork_stream(rngs, "dropout", "MultiHeadAttention") if dropout_rate > 0.0 else None
        )
        self.num_heads = num_heads
        self.in_features = in_features
        self.qkv_features = qkv_features
        self.out_features = out_features
        self.in_kv_features = in_kv_features
        self.head_dim = head_dim
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.broadcast_dropout = broadcast_dropout
        self.dropout_rate = dropout_rate
        self.deterministic = deterministic
        self.precision = precision
        self.attention_fn = attention_fn

    def __call__(
        self,
        inputs_q: jax.Array,
        inputs_k: jax.Array | None = None,
        inputs_v: jax.Array | None = None,
        *,
        mask: jax.Array | None = None,
        deterministic: bool | None = None,
        rngs: RngsArg | jax.Array | None = None,
    ) -> jax.Array:
        """Attend from `inputs_q` to `inputs_k` (default `inputs_q`) over values from
        `inputs_v` (default `inputs_k`). `mask` is True where attention is allowed."""
        inputs_k = inputs_q if inputs_k is None else inputs_k
        inputs_v = inputs_k if inputs_v is None else inputs_v
        query, key, value = self.query(inputs_q), self.key(inputs_k), self.value(inputs_v)
        if self.query_ln is not None:
            query, key = self.query_ln(query), self.key_ln(key)
        deterministic = first_not_none(deterministic, self.deterministic)
        dropout_rng = None
        if self.dropout_rate > 0.0:
            if deterministic is None:
                raise ValueError(
                    "MultiHeadAttention with `dropout_rate` > 0 needs `deterministic`: set it at "
                    "construction, per call, or with `model.train()` / `model.eval()`."
                )
            if not deterministic:
                dropout_rng = call_key(rngs, self.rngs, "dropout", "MultiHeadAttention")
        out = self.attention_fn(
            query,
            key,
            value,
            mask=mask,
            broadcast_dropout=self.broadcast_dropout,
            dropout_rng=dropout_rng,
            dropout_rate=self.dropout_rate,
            deterministic=bool(deterministic),
            dtype=self.dtype,
            precision=self.precision,
        )
        return self.out(out)
