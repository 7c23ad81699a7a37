"""Attention: `dot_product_attention`, the mask helpers, and `MultiHeadAttention`.

Arrays are laid out `(*batch, length, num_heads, head_dim)`; masks and attention weights
`(*batch, num_heads, q_length, kv_length)`. Keys and values may have fewer heads than
queries (grouped-query attention): each key/value head serves `q_heads // kv_heads`
query heads. `is_causal` lets each query position attend only to itself and earlier key
positions. Dropout on the attention weights draws from the `dropout` stream, like
`Dropout` (explicit `rngs=` at call, or a stream forked at construction).

`MultiHeadAttention(decode=True)` decodes autoregressively: `init_cache(input_shape)`
creates `Cache` Variables for keys and values, and each call takes one position, writes
its key and value at the cache index and attends to every position cached so far.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from jax import lax

from bryo_graph import Cache, Intermediate
from bryo_rngs import RngStream

from . import dtypes, initializers
from ._common import (
    NO_METADATA,
    Metadata,
    OutSharding,
    RngsArg,
    call_key,
    first_given,
    first_not_none,
    fork_stream,
)
from ._linear import LinearGeneral, default_bias_init, default_kernel_init
from ._module import Module
from ._normalization import LayerNorm


def _check_qkv(query: jax.Array, key: jax.Array, value: jax.Array | None = None) -> None:
    """Raise, naming the arrays and axes, unless the shapes fit attention."""
    arrays = {"query": query, "key": key} | ({} if value is None else {"value": value})
    ranks = {name: a.ndim for name, a in arrays.items()}
    if len(set(ranks.values())) > 1 or query.ndim < 3:
        raise ValueError(
            "attention: query, key and value must have the same rank, at least 3 "
            f"(*batch, length, heads, head_dim); got ranks {ranks}."
        )
    batches = {name: tuple(a.shape[:-3]) for name, a in arrays.items()}
    if len(set(batches.values())) > 1:
        raise ValueError(
            f"attention: the batch dims (all axes but the last 3) must match; got {batches}."
        )
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            "attention: query and key depths must match (head_dim, axis -1); got "
            f"{query.shape[-1]} and {key.shape[-1]}."
        )
    for name, a in arrays.items():
        if name != "query" and query.shape[-2] % a.shape[-2]:
            raise ValueError(
                f"attention: the query heads (axis -2: {query.shape[-2]}) must be a multiple "
                f"of the {name} heads ({a.shape[-2]}) for grouped-query attention."
            )
    if value is not None and key.shape[-3] != value.shape[-3]:
        raise ValueError(
            "attention: key and value lengths must match (axis -3); got "
            f"{key.shape[-3]} and {value.shape[-3]}."
        )


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
    module: Module | None = None,
    promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
    is_causal: bool = False,
) -> jax.Array:
    """`softmax(q·k / sqrt(head_dim) + bias, masked)`, with dropout on the weights.

    Args:
        query: `(*batch, q_length, q_heads, head_dim)`.
        key: `(*batch, kv_length, kv_heads, head_dim)`; `q_heads` a multiple of `kv_heads`.
        bias, mask: broadcastable to `(*batch, q_heads, q_length, kv_length)`; `mask`
            is True where attention is allowed.
        broadcast_dropout: one dropout mask for all batch entries and heads.
        dropout_rng: the dropout key (needed when `dropout_rate > 0` and not deterministic).
        dropout_rate, deterministic: dropout on the weights.
        dtype, precision: computation dtype and einsum precision.
        module: a Module to `sow` the weights into (as `Intermediate` 'attention_weights').
        promote_dtype: casts `(query, key)` to the computation dtype.
        is_causal: also mask every key position after the query's.

    Returns:
        The weights, `(*batch, q_heads, q_length, kv_length)`.
    """
    query, key = promote_dtype((query, key), dtype=dtype)
    dtype = query.dtype
    _check_qkv(query, key)
    q_heads, kv_heads = query.shape[-2], key.shape[-2]
    query = query / jnp.sqrt(query.shape[-1]).astype(dtype)
    if q_heads == kv_heads:
        weights = jnp.einsum("...qhd,...khd->...hqk", query, key, precision=precision)
    else:
        group = q_heads // kv_heads
        query = query.reshape(*query.shape[:-2], kv_heads, group, query.shape[-1])
        weights = jnp.einsum(
            "...qhgd,...kh1d->...hgqk", query, key[..., None, :], precision=precision
        )
        weights = weights.reshape(*weights.shape[:-4], q_heads, *weights.shape[-2:])
    if bias is not None:
        weights = weights + bias
    masks = [] if mask is None else [mask]
    if is_causal:
        causal = jnp.tril(jnp.ones(weights.shape[-2:], dtype=dtype))
        masks.append(jnp.broadcast_to(causal, weights.shape if mask is None else mask.shape))
    combined = combine_masks(*masks, dtype=dtype)
    if combined is not None:
        weights = jnp.where(combined, weights, jnp.finfo(dtype).min)
    weights = jax.nn.softmax(weights).astype(dtype)
    if module is not None:
        module.sow(Intermediate, "attention_weights", weights)
    if not deterministic and dropout_rate > 0.0:
        if dropout_rng is None:
            raise ValueError(
                "`dropout_rng` is needed for attention dropout (`dropout_rate` > 0 and not "
                "`deterministic`)."
            )
        keep_prob = 1.0 - dropout_rate
        shape = weights.shape
        if broadcast_dropout:  # one mask for every batch entry and head
            shape = (1,) * (key.ndim - 2) + shape[-2:]
        keep = jax.random.bernoulli(dropout_rng, keep_prob, shape)
        weights = weights * (keep.astype(dtype) / jnp.asarray(keep_prob, dtype=dtype))
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
    module: Module | None = None,
    promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
    is_causal: bool = False,
) -> jax.Array:
    """Attention output `(*batch, q_length, q_heads, head_dim)`: the weights of
    `dot_product_attention_weights` (same arguments) applied to `value`
    (`(*batch, kv_length, kv_heads, head_dim)`).

    Without dropout and `module`, this is `jax.nn.dot_product_attention` (which may
    use a fused kernel), as in Flax.
    """
    query, key, value = promote_dtype((query, key, value), dtype=dtype)
    _check_qkv(query, key, value)
    if dropout_rate == 0.0 and module is None:
        return _fused_attention(query, key, value, bias, mask, is_causal)
    weights = dot_product_attention_weights(
        query,
        key,
        bias,
        mask,
        broadcast_dropout,
        dropout_rng,
        dropout_rate,
        deterministic,
        query.dtype,
        precision,
        module,
        promote_dtype,
        is_causal,
    )
    q_heads, v_heads = weights.shape[-3], value.shape[-2]
    if q_heads == v_heads:
        return jnp.einsum("...hqk,...khd->...qhd", weights, value, precision=precision)
    group = q_heads // v_heads
    weights = weights.reshape(*weights.shape[:-3], v_heads, group, *weights.shape[-2:])
    out = jnp.einsum("...hgqk,...kh1d->...qhgd", weights, value[..., None, :], precision=precision)
    return out.reshape(*out.shape[:-3], q_heads, out.shape[-1])


def _fused_attention(
    query: jax.Array,
    key: jax.Array,
    value: jax.Array,
    bias: jax.Array | None,
    mask: jax.Array | None,
    is_causal: bool,
) -> jax.Array:
    """`jax.nn.dot_product_attention`, with every batch axis folded into one."""
    shape = query.shape
    if len(shape) > 4:

        def fold(x: jax.Array) -> jax.Array:
            return x.reshape(math.prod(x.shape[:-3]), *x.shape[-3:])

        query, key, value = fold(query), fold(key), fold(value)
        bias = None if bias is None else fold(bias)
        mask = None if mask is None else fold(mask)
    if mask is not None:
        mask = mask.astype(jnp.bool_)
    out = jax.nn.dot_product_attention(query, key, value, bias, mask, is_causal=is_causal)
    return out.reshape(shape[:-1] + out.shape[-1:]) if len(shape) > 4 else out


def make_attention_mask(
    query_input: jax.Array,
    key_input: jax.Array,
    pairwise_fn: Callable[[jax.Array, jax.Array], jax.Array] = jnp.multiply,
    extra_batch_dims: int = 0,
    dtype: jnp.dtype = jnp.float32,
) -> jax.Array:
    """A `(*batch, 1, q_length, kv_length)` mask from per-position query and key flags,
    with `extra_batch_dims` leading axes of size 1 added."""
    mask = pairwise_fn(query_input[..., :, None], key_input[..., None, :])
    mask = mask[..., None, :, :]
    mask = jnp.expand_dims(mask, tuple(range(extra_batch_dims)))
    return mask.astype(dtype)


def make_causal_mask(
    x: jax.Array, extra_batch_dims: int = 0, dtype: jnp.dtype = jnp.float32
) -> jax.Array:
    """A `(*batch, 1, length, length)` mask letting each position attend to itself and before."""
    positions = jnp.broadcast_to(jnp.arange(x.shape[-1], dtype=jnp.int32), x.shape)
    return make_attention_mask(positions, positions, jnp.greater_equal, extra_batch_dims, dtype)


def combine_masks(*masks: jax.Array | None, dtype: jnp.dtype = jnp.float32) -> jax.Array | None:
    """The logical AND of the masks that are not None (None if all are); same ranks only."""
    present = [m for m in masks if m is not None]
    if not present:
        return None
    if len({m.ndim for m in present}) > 1:
        raise ValueError(
            f"combine_masks: the masks must have the same rank; got {[m.ndim for m in present]}."
        )
    mask = present[0]
    for other in present[1:]:
        mask = jnp.logical_and(mask, other)
    return mask.astype(dtype)


class MultiHeadAttention(Module):
    """Multi-head dot-product attention with learned query/key/value/output projections.

    >>> mha = MultiHeadAttention(4, 16, dropout_rate=0.1, rngs=Rngs(0))    # doctest: +SKIP
    >>> mha(x, rngs=Rngs(dropout=1)).shape                                  # doctest: +SKIP

    Args:
        num_heads: the number of query heads; `qkv_features` must be divisible by it.
        in_features: the size of the last axis of the query input.
        qkv_features: the total size of queries (and of keys and values per query head;
            default `in_features`).
        out_features: the size of the output's last axis (default `in_features`).
        num_kv_heads: key/value heads (default `num_heads`); fewer gives grouped-query
            attention, `num_heads` must be a multiple.
        in_kv_features: the size of the key/value inputs' last axis (default `in_features`).
        dtype, param_dtype, precision: as `Linear`.
        broadcast_dropout: one dropout mask for all batch entries and heads.
        dropout_rate: dropout on the attention weights, from the `dropout` stream.
        deterministic: the default for calls (`model.eval()` sets True, `train()` False).
        kernel_init, out_kernel_init, bias_init, out_bias_init, use_bias: projections.
        attention_fn: `dot_product_attention` or a function with its signature.
        decode: the default for calls: decode one position at a time with a cache
            (`init_cache` first).
        normalize_qk: apply a `LayerNorm` to queries and keys (per head).
        qkv_promote_dtype, out_promote_dtype, ln_promote_dtype: the `promote_dtype` of the
            projections, the output projection and the query/key norms.
        qkv_dot_general, out_dot_general, qkv_dot_general_cls, out_dot_general_cls: the
            contractions of the projections (see `LinearGeneral`).
        rngs: initialises the projections (`params`); with `dropout_rate > 0` and
            `keep_rngs` the layer also keeps a stream forked from `rngs['dropout']` for
            calls without `rngs=`.
        keep_rngs: keep that stream (default True).

    `kernel_metadata`, `bias_metadata`, `out_kernel_metadata`, `out_bias_metadata`,
    `query_ln_scale_metadata`, `key_ln_scale_metadata`: metadata of the Params (the
    output's default to the projections').
    """

    def __init__(
        self,
        num_heads: int,
        in_features: int,
        qkv_features: int | None = None,
        out_features: int | None = None,
        num_kv_heads: int | None = None,
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
        decode: bool | None = None,
        normalize_qk: bool = False,
        qkv_promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
        out_promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
        ln_promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
        qkv_dot_general: Callable[..., jax.Array] | None = None,
        out_dot_general: Callable[..., jax.Array] | None = None,
        qkv_dot_general_cls: Callable[[], Callable[..., jax.Array]] | None = None,
        out_dot_general_cls: Callable[[], Callable[..., jax.Array]] | None = None,
        rngs: RngsArg,
        keep_rngs: bool = True,
        kernel_metadata: Metadata = NO_METADATA,
        out_kernel_metadata: Metadata = NO_METADATA,
        bias_metadata: Metadata = NO_METADATA,
        out_bias_metadata: Metadata = NO_METADATA,
        query_ln_scale_metadata: Metadata = NO_METADATA,
        key_ln_scale_metadata: Metadata = NO_METADATA,
    ) -> None:
        qkv_features = in_features if qkv_features is None else qkv_features
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if qkv_features % num_heads:
            raise ValueError(
                f"MultiHeadAttention: `qkv_features`={qkv_features} must be divisible by "
                f"`num_heads`={num_heads}."
            )
        if num_heads % num_kv_heads:
            raise ValueError(
                f"MultiHeadAttention: `num_heads`={num_heads} must be divisible by "
                f"`num_kv_heads`={num_kv_heads}."
            )
        head_dim = qkv_features // num_heads
        self.num_heads = num_heads
        self.in_features = in_features
        self.qkv_features = qkv_features
        self.out_features = in_features if out_features is None else out_features
        self.num_kv_heads = num_kv_heads
        self.in_kv_features = in_features if in_kv_features is None else in_kv_features
        self.head_dim = head_dim

        def projection(features_in: int, heads: int) -> LinearGeneral:
            return LinearGeneral(
                features_in,
                (heads, head_dim),
                dtype=dtype,
                param_dtype=param_dtype,
                kernel_init=kernel_init,
                bias_init=bias_init,
                use_bias=use_bias,
                precision=precision,
                promote_dtype=qkv_promote_dtype,
                dot_general=qkv_dot_general,
                dot_general_cls=qkv_dot_general_cls,
                rngs=rngs,
                kernel_metadata=kernel_metadata,
                bias_metadata=bias_metadata,
            )

        self.query = projection(in_features, num_heads)
        self.key = projection(self.in_kv_features, num_kv_heads)
        self.value = projection(self.in_kv_features, num_kv_heads)
        self.query_ln: LayerNorm | None = None
        self.key_ln: LayerNorm | None = None
        if normalize_qk:
            self.query_ln, self.key_ln = (
                LayerNorm(
                    head_dim,
                    use_bias=False,
                    dtype=dtype,
                    param_dtype=param_dtype,
                    promote_dtype=ln_promote_dtype,
                    rngs=rngs,
                    scale_metadata=metadata,
                )
                for metadata in (query_ln_scale_metadata, key_ln_scale_metadata)
            )
        self.out = LinearGeneral(
            (num_heads, head_dim),
            self.out_features,
            axis=(-2, -1),
            kernel_init=out_kernel_init or kernel_init,
            bias_init=out_bias_init or bias_init,
            use_bias=use_bias,
            dtype=dtype,
            param_dtype=param_dtype,
            precision=precision,
            promote_dtype=out_promote_dtype,
            dot_general=out_dot_general,
            dot_general_cls=out_dot_general_cls,
            rngs=rngs,
            kernel_metadata=out_kernel_metadata or kernel_metadata,
            bias_metadata=out_bias_metadata or bias_metadata,
        )
        self.rngs: RngStream | None = (
            fork_stream(rngs, "dropout", "MultiHeadAttention")
            if keep_rngs and dropout_rate > 0.0
            else None
        )
        self.cached_key: Cache | None = None
        self.cached_value: Cache | None = None
        self.cache_index: Cache | None = None
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.broadcast_dropout = broadcast_dropout
        self.dropout_rate = dropout_rate
        self.deterministic = deterministic
        self.precision = precision
        self.use_bias = use_bias
        self.attention_fn = attention_fn
        self.decode = decode
        self.normalize_qk = normalize_qk

    def __call__(
        self,
        inputs_q: jax.Array,
        inputs_k: jax.Array | None = None,
        inputs_v: jax.Array | None = None,
        *,
        mask: jax.Array | None = None,
        deterministic: bool | None = None,
        rngs: RngsArg | jax.Array | None = None,
        sow_weights: bool = False,
        decode: bool | None = None,
        is_causal: bool = False,
        out_sharding: OutSharding | None = None,
        qkv_sharding: OutSharding | None = None,
    ) -> jax.Array:
        """Attend from `inputs_q` to `inputs_k` (default `inputs_q`) over values from
        `inputs_v` (default `inputs_k`).

        Args:
            inputs_q, inputs_k, inputs_v: `(*batch, length, features)`.
            mask: broadcastable to `(*batch, num_heads, q_length, kv_length)`, True where
                attention is allowed.
            deterministic, decode: override the layer's defaults for this call.
            rngs: the dropout key source for this call (an `Rngs`, a stream or a key).
            sow_weights: keep the attention weights as `Intermediate`
                `attention_weights` on this layer.
            is_causal: attend only to earlier positions (and the same one).
            out_sharding, qkv_sharding: output shardings of the output and q/k/v
                projections.
        """
        if inputs_k is None:
            if inputs_v is not None:
                raise ValueError(
                    "MultiHeadAttention: `inputs_v` given without `inputs_k`; pass the same "
                    "array as `inputs_k` and leave `inputs_v` out to use it for both."
                )
            inputs_k = inputs_q
        inputs_v = inputs_k if inputs_v is None else inputs_v
        if inputs_q.shape[-1] != self.in_features:
            raise ValueError(
                f"MultiHeadAttention expects `inputs_q` with last axis `in_features`="
                f"{self.in_features}; got shape {tuple(inputs_q.shape)}."
            )
        query = self.query(inputs_q, out_sharding=qkv_sharding)
        key = self.key(inputs_k, out_sharding=qkv_sharding)
        value = self.value(inputs_v, out_sharding=qkv_sharding)
        if self.query_ln is not None and self.key_ln is not None:
            query, key = self.query_ln(query), self.key_ln(key)
        if first_not_none(decode, self.decode):  # unset everywhere: no decoding (Flax raises)
            key, value, mask = self._decode_step(key, value, mask)
        deterministic, dropout_rng = self._dropout_key(deterministic, rngs)
        out = self.attention_fn(
            query,
            key,
            value,
            mask=mask,
            dropout_rng=dropout_rng,
            dropout_rate=self.dropout_rate,
            broadcast_dropout=self.broadcast_dropout,
            deterministic=deterministic,
            dtype=self.dtype,
            precision=self.precision,
            module=self if sow_weights else None,
            is_causal=is_causal,
        )
        return self.out(out, out_sharding=out_sharding)

    def _dropout_key(
        self, deterministic: bool | None, rngs: RngsArg | jax.Array | None
    ) -> tuple[bool, jax.Array | None]:
        """This call's `deterministic` and dropout key (None without dropout)."""
        if self.dropout_rate <= 0.0:
            return True, None
        deterministic = bool(
            first_given(
                deterministic,
                self.deterministic,
                layer="MultiHeadAttention",
                name="deterministic",
            )
        )
        if deterministic:
            return True, None
        return False, call_key(rngs, self.rngs, "dropout", "MultiHeadAttention")

    def _decode_step(
        self, key: jax.Array, value: jax.Array, mask: jax.Array | None
    ) -> tuple[jax.Array, jax.Array, jax.Array | None]:
        """Write this position's key and value into the cache; return the cached keys and
        values and `mask` restricted to the positions cached so far."""
        if self.cached_key is None or self.cached_value is None or self.cache_index is None:
            raise ValueError(
                "MultiHeadAttention: decoding needs a cache; call "
                "`layer.init_cache(input_shape)` first (`input_shape`: (*batch, max_length, "
                "features))."
            )
        *batch, max_length, heads, depth = self.cached_key.shape
        expected = (*batch, 1, heads, depth)
        if tuple(key.shape) != expected:
            raise ValueError(
                f"MultiHeadAttention: decoding takes one position at a time: the key is "
                f"{tuple(key.shape)}, the cache expects {expected} (batch {tuple(batch)}, "
                f"length 1, {heads} heads, head_dim {depth})."
            )
        index = self.cache_index[...]
        zero = jnp.array(0, dtype=index.dtype)
        at = (zero,) * len(batch) + (index, zero, zero)
        key = lax.dynamic_update_slice(self.cached_key[...], key, at)
        value = lax.dynamic_update_slice(self.cached_value[...], value, at)
        self.cached_key[...] = key
        self.cached_value[...] = value
        self.cache_index[...] = index + 1
        seen = jnp.broadcast_to(jnp.arange(max_length) <= index, (*batch, 1, 1, max_length))
        return key, value, combine_masks(mask, seen)

    def set_view(
        self,
        deterministic: bool | None = None,
        decode: bool | None = None,
        batch_size: int | Sequence[int] | None = None,
        max_length: int | None = None,
    ) -> None:
        """Used by `nnx.view`.

        Args:
            deterministic: if True, no attention dropout.
            decode: if True, decode autoregressively (creates the cache when missing).
            batch_size: the cache's batch size (or batch shape), needed to create it.
            max_length: the cache's length, needed to create it.
        """
        if deterministic is not None:
            self.deterministic = deterministic
        if decode is None:
            return
        self.decode = decode
        if decode and getattr(self, "cached_key", None) is None:
            if batch_size is None or max_length is None:
                raise TypeError(
                    "`view(decode=True)` creates the decoding cache of MultiHeadAttention: "
                    "pass `batch_size=` and `max_length=` too."
                )
            batch = (batch_size,) if isinstance(batch_size, int) else tuple(batch_size)
            self.init_cache((*batch, max_length, 0), self.dtype or jnp.float32)

    def init_cache(self, input_shape: Sequence[int], dtype: jnp.dtype = jnp.float32) -> None:
        """Create the decoding cache for inputs of shape `(*batch, max_length, features)`:
        `cached_key`, `cached_value` (`(*batch, max_length, num_kv_heads, head_dim)`) and
        `cache_index` (0), all `Cache` Variables."""
        shape = (*input_shape[:-1], self.num_kv_heads, self.head_dim)
        self.cached_key = Cache(jnp.zeros(shape, dtype))
        self.cached_value = Cache(jnp.zeros(shape, dtype))
        self.cache_index = Cache(jnp.array(0, dtype=jnp.int32))
