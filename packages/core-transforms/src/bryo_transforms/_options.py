"""Argument handling every transform shares: decorator use and static argument numbers."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any


def decorator_or_none(transform: Callable, f: Callable | None, **options: Any) -> Any:
    """`transform` with `options` bound when used as `@transform(...)` (no `f`), else None.

    Raises a TypeError naming the transform when `f` is not callable (options were
    passed positionally).
    """
    if f is None:
        return functools.partial(transform, **options)
    if not callable(f):
        raise TypeError(
            f"`{transform.__name__}` takes the function first; got {type(f).__name__}. Pass "
            f"options by keyword: `@{transform.__name__}(static_argnums=...)`."
        )
    return None


def as_argnums(argnums: int | Sequence[int], name: str = "argnums") -> tuple[int, ...]:
    """`argnums` as a tuple of ints, or a TypeError naming `name`."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not all(isinstance(n, int) for n in nums):
        raise TypeError(f"`{name}` must be an int or a sequence of ints; got {argnums!r}.")
    return nums


def static_args(
    args: Sequence, static_argnums: tuple[int, ...], static_argnames: tuple[str, ...]
) -> frozenset[int | str]:
    """The positions (negative ones resolved) and names of a call's static arguments."""
    if not static_argnums and not static_argnames:
        return frozenset()
    n = len(args)
    positions = frozenset(i % n if n and i < 0 else i for i in static_argnums)
    return positions | frozenset(static_argnames)
