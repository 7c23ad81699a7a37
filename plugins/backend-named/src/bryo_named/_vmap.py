"""`vmap(fn, axis)`: map a function over a named axis of its NamedArray arguments."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import bryo_scan

from ._axis import Axis, AxisSelection


def vmap(
    fn: Callable[..., Any], axis: AxisSelection | Mapping[str, int], *, map_unnamed: bool = False
) -> Callable[..., Any]:
    """Vectorize `fn` over the named `axis` (Haliax's `vmap`), or over several axes.

    NamedArray arguments with `axis` lose it inside `fn`; those without it, unnamed arrays
    (unless `map_unnamed`, then over their first axis) and other values are broadcast.
    NamedArray outputs gain `axis` in front; plain array outputs a leading dimension.
    Several axes (a tuple, a list or a dict `{name: size}`) map over each in turn, the
    first outermost: outputs gain them in that order.

    Example:
        >>> x = ones({"Batch": 4, "Features": 3})  # doctest: +SKIP
        >>> vmap(lambda row: row.sum(), "Batch")(x).shape  # doctest: +SKIP
        {'Batch': 4}
    """
    if isinstance(axis, Mapping):
        axis = tuple(Axis(name, size) for name, size in axis.items())
    return bryo_scan.vmap(fn, axis, map_unnamed=map_unnamed)
