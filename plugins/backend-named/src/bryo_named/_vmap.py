"""`vmap(fn, axis)`: map a function over a named axis of its NamedArray arguments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import bryo_scan

from ._axis import AxisSelector


def vmap(
    fn: Callable[..., Any], axis: AxisSelector, *, map_unnamed: bool = False
) -> Callable[..., Any]:
    """Vectorize `fn` over the named `axis` (Haliax's `vmap`).

    NamedArray arguments with `axis` lose it inside `fn`; those without it, unnamed arrays
    (unless `map_unnamed`, then over their first axis) and other values are broadcast.
    NamedArray outputs gain `axis` in front; plain array outputs a leading dimension.

    Example:
        >>> x = ones({"Batch": 4, "Features": 3})  # doctest: +SKIP
        >>> vmap(lambda row: row.sum(), "Batch")(x).shape  # doctest: +SKIP
        {'Batch': 4}
    """
    return bryo_scan.vmap(fn, axis, map_unnamed=map_unnamed)
