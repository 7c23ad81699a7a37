"""The `{filter: value}` mapping a module-shaped prefix was built from, kept beside it.

`prefix(model, {Intermediate: 0, ...: None})` gives each Variable the model has a value;
a Variable the transformed function adds (`sow` inside `scan`) has no place in that
prefix. The graph nodes of a prefix are remembered here (weakly, by identity) with the
mapping's `(filter, value)` pairs, so that the `StateAxes` a transform reads from such a
prefix can end with them: state that appears later is placed by the user's filters, as
Flax NNX places it (there, `capture` makes its Variables before the prefix is built).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping

from bryo_filters import Filter, to_predicate
from bryo_pytree import Path

_LOCK = threading.Lock()
# prefix graph node -> the (filter, value) pairs it was built from; dies with the prefix
_FILTERS: weakref.WeakKeyDictionary[object, tuple[tuple[Filter, object], ...]] = (
    weakref.WeakKeyDictionary()
)


class UnderBase:
    """The filter `filter` seen from a node at `base` in the tree `prefix` was given:
    matches `(path, leaf)` when `filter` matches `(base + path, leaf)`."""

    __slots__ = ("base", "filter", "predicate")

    def __init__(self, filter: Filter, base: Path) -> None:
        self.filter, self.base = filter, base
        self.predicate = to_predicate(filter)

    def __call__(self, path: Path, leaf: object) -> bool:
        return self.predicate((*self.base, *path), leaf)

    def __repr__(self) -> str:
        return f"UnderBase({self.filter!r}, {self.base!r})"


def remember(node: object, filter_map: Mapping[Filter, object], base: Path) -> None:
    """Keep `filter_map`'s pairs for `node`, a graph node of a prefix at `base`."""
    items = tuple((f if not base else UnderBase(f, base), value) for f, value in filter_map.items())
    try:
        with _LOCK:
            _FILTERS[node] = items
    except TypeError:  # not weakly referable: a prefix without the fallback
        pass


def filters_of(node: object) -> tuple[tuple[Filter, object], ...]:
    """The `(filter, value)` pairs `node` (a prefix's graph node) was built from, or ()."""
    with _LOCK:
        try:
            return _FILTERS.get(node, ())
        except TypeError:  # unhashable or not weakly referable: never remembered
            return ()
