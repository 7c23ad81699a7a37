"""`reseed`: set the streams of a graph back to a known state, by stream name.

A model built from `Rngs(params=0, dropout=1)` keeps, in its Dropout layers, streams
forked from the `dropout` stream. `reseed(model, dropout=1)` puts every stream tagged
`dropout` in the state a fresh `Rngs(dropout=1)` would give it, so the model then draws
exactly the keys it drew the first time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, TypeAlias

import jax
import jax.numpy as jnp

from bryo_graph import iter_graph
from bryo_pytree import Path, path_str

from ._rngs import Rngs, RngStream, RngValue, as_key

ReseedPolicy: TypeAlias = (
    Literal["scalars_only", "match_shape"] | Callable[[Path, jax.Array, tuple[int, ...]], jax.Array]
)


def reseed(
    node: object,
    /,
    *,
    graph: bool | None = None,
    policy: ReseedPolicy = "scalars_only",
    **seeds: RngValue,
) -> None:
    """Reset the key and count of the streams in `node` named by `seeds`.

    A stream held directly by an `Rngs` gets the key `Rngs(name=seed)` would hold; a
    stream held elsewhere (a layer's stream, forked from an Rngs when it was built) gets
    the key that a fresh `Rngs(name=seed)` forks first. Counts go back to zero either way.

    >>> model = Model(Rngs(params=0, dropout=1))  # doctest: +SKIP
    >>> y1 = model(x)                             # doctest: +SKIP
    >>> reseed(model, dropout=1)                  # doctest: +SKIP
    >>> assert jnp.allclose(model(x), y1)         # doctest: +SKIP

    Args:
        node: any graph holding streams.
        graph: walk `node` as a graph (the default) or, with False, as a pytree.
        policy: for streams whose key is split (not a scalar): `'scalars_only'` raises,
            `'match_shape'` splits the new key to the stream's shape, or a callable
            `(path, key, shape) -> keys`.
        **seeds: stream name (its `tag`) -> int seed or `jax.random.key`.

    Raises:
        ValueError: a name matches no stream in `node` (the message lists the stream
            names found), or a split stream under `'scalars_only'`. Nothing is changed.
    """
    choose = _policy(policy)
    held_by_rngs = set()
    streams: list[tuple[Path, RngStream]] = []
    for path, value in iter_graph(node, graph=graph):
        if isinstance(value, Rngs):
            held_by_rngs.update(id(s) for _, s in value.items())
        elif isinstance(value, RngStream):
            streams.append((path, value))
    found = {stream.tag for _, stream in streams}
    unknown = sorted(set(seeds) - found)
    if unknown:
        raise ValueError(
            f"`reseed` got seeds for {unknown}, but the graph has no stream by those names; "
            f"its streams are {sorted(found)}. Pass only names of streams it holds."
        )
    writes = []
    for path, stream in streams:
        if stream.tag not in seeds:
            continue
        root = as_key(seeds[stream.tag], name=stream.tag)
        key = root if id(stream) in held_by_rngs else jax.random.fold_in(root, 0)
        shape = tuple(stream.key.value.shape)
        if shape:
            key = choose(path, key, shape)
        writes.append((stream, key))
    for stream, key in writes:
        stream.key.value = key
        stream.count.value = jnp.zeros(key.shape, jnp.uint32)


def _policy(policy: ReseedPolicy) -> Callable[[Path, jax.Array, tuple[int, ...]], jax.Array]:
    if policy == "scalars_only":
        return _scalars_only
    if policy == "match_shape":
        return _match_shape
    if callable(policy):
        return policy
    raise ValueError(
        f"`policy` must be 'scalars_only', 'match_shape' or a callable "
        f"`(path, key, shape) -> keys`; got {policy!r}."
    )


def _scalars_only(path: Path, key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    raise ValueError(
        f"`reseed` cannot reseed the stream at {path_str(path)}: it holds split keys of shape "
        f"{shape}. Pass `policy='match_shape'` to split the new key to that shape."
    )


def _match_shape(path: Path, key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return jax.random.split(key, shape)
