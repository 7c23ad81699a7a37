"""What every layer needs: keys from the `Rngs` it is given, parameters with metadata,
and call-time options that fall back to construction-time ones.

Layers take their parameter keys from the `params` stream and keep, for call-time
randomness, a stream *forked* from the one they use (`dropout` by default): each layer then
owns its own stream, so splitting or restoring the caller's `Rngs` never reaches into it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec
from jax.typing import ArrayLike, DTypeLike

from bryo_graph import Param, Variable
from bryo_rngs import Rngs, RngStream

T = TypeVar("T")
V = TypeVar("V", bound=Variable)

RngsArg = Rngs | RngStream
"""What a layer accepts as `rngs=`: an `Rngs`, or one of its streams."""

# Values typed Any: they go to Variable(**metadata), whose `ref=`/`hijax=` keywords are typed.
Metadata = Mapping[str, Any]
"""What a layer's `*_metadata=` keywords take: metadata for one of its `Param`s."""

NO_METADATA: Metadata = MappingProxyType({})

OutSharding = NamedSharding | PartitionSpec
"""What a layer's call takes as `out_sharding=`: the sharding of its result (on a mesh of
Explicit axes)."""


def _check_rngs(rngs: object, layer: str) -> RngsArg:
    if isinstance(rngs, Rngs | RngStream):
        return rngs
    raise TypeError(
        f"`rngs` of {layer} must be an `nnx.Rngs` (e.g. `rngs=nnx.Rngs(0)`) or an "
        f"`RngStream`; got {type(rngs).__name__}: {rngs!r:.60}."
    )


def params_key(rngs: object, layer: str) -> jax.Array:
    """The next key of the `params` stream (or the default stream) of `rngs`."""
    rngs = _check_rngs(rngs, layer)
    return rngs.stream("params")() if isinstance(rngs, Rngs) else rngs()


def init_param(
    init: Callable[..., jax.Array],
    rngs: object,
    layer: str,
    shape: tuple[int, ...],
    param_dtype: object,
    metadata: Metadata = NO_METADATA,
    kind: type[V] = Param,
) -> V:
    """A `kind` (default `Param`) of `shape` drawn by `init` from the `params` stream."""
    return kind(init(params_key(rngs, layer), shape, param_dtype), **metadata)


def optional_bias(
    use_bias: bool,
    bias_init: Callable[..., jax.Array],
    rngs: object,
    layer: str,
    shape: tuple[int, ...],
    param_dtype: object,
    metadata: Metadata = NO_METADATA,
) -> Param | None:
    """A bias `Param` of `shape` drawn from the `params` stream, or None without `use_bias`."""
    if not use_bias:
        return None
    return init_param(bias_init, rngs, layer, shape, param_dtype, metadata)


def fork_stream(rngs: object, collection: str, layer: str) -> RngStream:
    """A stream for `layer`'s own use, forked from `rngs[collection]`, tagged `collection`.

    The tag is the collection even when `rngs` has no such stream and the default one
    serves it, so the filter `'dropout'` always finds every layer's dropout stream.
    """
    rngs = _check_rngs(rngs, layer)
    stream = rngs.stream(collection) if isinstance(rngs, Rngs) else rngs
    return stream.fork(tag=collection)


def call_key(rngs: object, stored: RngStream | None, collection: str, layer: str) -> jax.Array:
    """The key for one random call: from `rngs` given at call time, else the stored stream.

    `rngs` may be an `Rngs` (its `collection` stream is used), an `RngStream`, or a key.
    """
    if rngs is None:
        if stored is None:
            raise ValueError(
                f"`deterministic` is False, but no `rngs` argument was provided to {layer}, "
                f"and it was built without `rngs`: pass `rngs=` to the call (an `nnx.Rngs` "
                f"with a {collection!r} or default stream), build it with `rngs=`, or make it "
                "deterministic (`deterministic=True` / `model.eval()`)."
            )
        return stored()
    if isinstance(rngs, Rngs):
        return rngs.stream(collection)()
    if isinstance(rngs, RngStream):
        return rngs()
    if isinstance(rngs, jax.Array) and jnp.issubdtype(rngs.dtype, jax.dtypes.prng_key):
        return rngs
    raise TypeError(
        f"`rngs` of {layer} must be an `nnx.Rngs`, an `RngStream` or a `jax.random.key`; "
        f"got {type(rngs).__name__}."
    )


def first_not_none(*values: T | None) -> T | None:
    """The first value that is not None (None if all are)."""
    return next((v for v in values if v is not None), None)


def first_given(*values: T | None, layer: str, name: str) -> T:
    """The first value that is not None: a call's argument, then the layer's attribute.

    Raises:
        ValueError: naming `name` and the ways to set it, when every value is None.
    """
    value = first_not_none(*values)
    if value is None:
        raise ValueError(
            f"{layer} needs `{name}`: pass it to the call (`layer(x, {name}=...)`), set it at "
            f"construction (`{layer}(..., {name}=...)`), or set it on the model (e.g. "
            "`model.train()` / `model.eval()`)."
        )
    return value


def get(variable: Param | None) -> jax.Array | None:
    """The value of an optional Variable (None for None)."""
    return None if variable is None else variable[...]


def standard_result_type(*args: ArrayLike | DTypeLike) -> jnp.dtype:
    """The dtype JAX's standard promotion gives `args`, arrays or dtypes (`bfloat16` and
    `float32` make `float32`), also under `jax_numpy_dtype_promotion="strict"`: choosing the
    dtype a layer computes in is the layer's job, and it casts to that dtype explicitly."""
    with jax.numpy_dtype_promotion("standard"):
        return jnp.dtype(jnp.result_type(*args))


def add_bias(y: jax.Array, bias: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """`y + bias` with `bias` reshaped to `shape` (as many axes as `y`: no implicit rank
    promotion) and both cast to the dtype standard promotion gives them (a `float32`
    `preferred_element_type` output plus a `bfloat16` bias is `float32`), so layers stay
    correct under `jax_numpy_rank_promotion="raise"` and strict dtype promotion."""
    dtype = standard_result_type(y.dtype, bias.dtype)
    return y.astype(dtype) + jnp.reshape(bias, shape).astype(dtype)
