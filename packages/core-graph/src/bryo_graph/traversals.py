"""`bryo_graph.traversals`: nested mappings to flat ones and back (Flax NNX's
`nnx.traversals`, which its model-surgery guide uses on `nnx.state(...).to_pure_dict()`).

>>> flat = flatten_mapping({"foo": 1, "bar": {"a": 2, "b": {}}})
>>> flat
{('foo',): 1, ('bar', 'a'): 2}
>>> unflatten_mapping(flat)
{'foo': 1, 'bar': {'a': 2}}
>>> flatten_mapping({"a": {"b": 1}}, sep="/")
{'a/b': 1}
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any as _Any

from bryo_pytree import pytree_dataclass as _pytree_dataclass

__all__ = ["IsLeafCallable", "empty_node", "flatten_mapping", "flatten_to_sequence"]
__all__ += ["unflatten_mapping"]

IsLeafCallable = Callable[[tuple[_Any, ...], Mapping[_Any, _Any]], bool]
"""`is_leaf(path, mapping)`: whether a nested mapping stays whole instead of being opened."""


@_pytree_dataclass
class _EmptyNode:
    """What `flatten_mapping(..., keep_empty_nodes=True)` keeps for an empty mapping."""

    def __repr__(self) -> str:
        return "empty_node"


empty_node = _EmptyNode()
"""The stand-in `flatten_mapping(keep_empty_nodes=True)` leaves at an empty mapping's path;
`unflatten_mapping` turns it back into `{}`."""


def _walk(
    xs: Mapping[_Any, _Any], is_leaf: IsLeafCallable | None, keep_empty: bool
) -> list[tuple[tuple[_Any, ...], _Any]]:
    """The `(path, leaf)` pairs of `xs`, depth first in each mapping's order (no recursion:
    deep nesting is fine)."""
    if not isinstance(xs, Mapping):
        raise TypeError(f"expected a Mapping to flatten; got a {type(xs).__qualname__}.")
    pairs: list[tuple[tuple[_Any, ...], _Any]] = []
    stack: list[tuple[tuple[_Any, ...], _Any]] = [((), xs)]
    while stack:
        path, value = stack.pop()
        if not isinstance(value, Mapping) or (is_leaf is not None and is_leaf(path, value)):
            pairs.append((path, value))
        elif not value:
            if keep_empty and path:
                pairs.append((path, empty_node))
        else:
            stack.extend(((*path, key), child) for key, child in reversed(list(value.items())))
    return pairs


def flatten_mapping(
    xs: Mapping[_Any, _Any],
    /,
    *,
    keep_empty_nodes: bool = False,
    is_leaf: IsLeafCallable | None = None,
    sep: str | None = None,
) -> dict[_Any, _Any]:
    """A nested mapping as one flat dict keyed by key tuples (or `sep`-joined strings).

    Args:
        xs: the nested mapping (a dict, a bryo `State`, ...).
        keep_empty_nodes: keep empty mappings, as `empty_node`, instead of dropping them.
        is_leaf: `is_leaf(path, mapping)`: a mapping for which it is True stays whole.
        sep: join the keys (strings) with it instead of keeping tuples.

    Returns:
        `{path: leaf}` in the mappings' own order.
    """
    pairs = _walk(xs, is_leaf, keep_empty_nodes)
    if sep is None:
        return dict(pairs)
    return {sep.join(path): leaf for path, leaf in pairs}


def flatten_to_sequence(
    xs: Mapping[_Any, _Any], /, *, is_leaf: IsLeafCallable | None = None
) -> list[tuple[tuple[_Any, ...], _Any]]:
    """A nested mapping as a list of `(path, leaf)` pairs (empty mappings dropped)."""
    return _walk(xs, is_leaf, False)


def unflatten_mapping(
    xs: Mapping[_Any, _Any] | Iterable[tuple[_Any, _Any]], /, *, sep: str | None = None
) -> dict[_Any, _Any]:
    """The nested dict of a flat mapping (or sequence of pairs) `flatten_mapping` made.

    Args:
        xs: `{path: leaf}` (paths as key tuples, or strings joined by `sep`), or pairs.
        sep: the separator the string paths were joined with.

    Returns:
        Nested dicts; an `empty_node` leaf becomes `{}`.

    Raises:
        TypeError: `xs` is neither a mapping nor pairs, or a path is not a tuple.
        ValueError: a path runs through a leaf another path put there.
    """
    if isinstance(xs, Mapping):
        items: Iterable[tuple[_Any, _Any]] = xs.items()
    elif isinstance(xs, Iterable):
        items = xs
    else:
        raise TypeError(f"expected a Mapping or (path, leaf) pairs; got {type(xs).__qualname__}.")
    result: dict[_Any, _Any] = {}
    for path, leaf in items:
        if sep is not None and isinstance(path, str):
            path = tuple(path.split(sep))
        if not isinstance(path, tuple) or not path:
            raise TypeError(
                f"`unflatten_mapping` takes non-empty tuples of keys as paths; got {path!r}"
                + ("" if sep else " (pass `sep=` for string paths)")
                + "."
            )
        node = result
        for depth, key in enumerate(path[:-1]):
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                raise ValueError(
                    f"path {path!r} runs through {path[: depth + 1]!r}, which holds a leaf."
                )
            node = child
        node[path[-1]] = {} if leaf is empty_node else leaf
    return result
