"""Argument handling every transform shares: decorator use and static argument numbers."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from bryo_graph import is_graph_node


def decorator_or_none(transform: Callable, f: Callable | None, **options: Any) -> Any:
    """`transform` with `options` bound when used as `@transform(...)` (no `f`), else None.

    Raises a TypeError naming the transform when `f` is not callable (options were
    passed positionally).
    """
    if f is None:
        return functools.partial(transform, **options)
    refuse_bound_method(transform.__name__, f)
    if not callable(f):
        raise TypeError(
            f"`{transform.__name__}` takes the function first; got {type(f).__name__}. Pass "
            f"options by keyword: `@{transform.__name__}(static_argnums=...)`."
        )
    return None


def refuse_bound_method(name: str, f: Callable) -> None:
    """Raise for a method bound to a graph node (`jit(model.method)`): the transform
    would see the model as a constant closed over, not as an argument whose state it
    lifts, as Flax NNX refuses it too."""
    owner = getattr(f, "__self__", None)
    if inspect.ismethod(f) and is_graph_node(owner):
        method = f.__func__.__name__
        raise ValueError(
            f"`{name}` does not take bound methods of graph nodes (got `{method}` bound to a "
            f"{type(owner).__name__}): the module would be a constant inside. Decorate the "
            f"method (`@{name}` in the class body), or pass the module: "
            f"`{name}({type(owner).__name__}.{method})(model, ...)`."
        )


def as_argnums(argnums: int | Sequence[int] | None, name: str = "argnums") -> tuple[int, ...]:
    """`argnums` (None: none) as a tuple of ints, or a TypeError naming `name`."""
    nums = () if argnums is None else (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not all(isinstance(n, int) for n in nums):
        raise TypeError(f"`{name}` must be an int or a sequence of ints; got {argnums!r}.")
    return nums


def as_argnames(argnames: str | Sequence[str] | None) -> tuple[str, ...]:
    """`argnames` (None: none) as a tuple of names."""
    if argnames is None:
        return ()
    return (argnames,) if isinstance(argnames, str) else tuple(argnames)


def named_positions(f: Callable, names: Sequence[str]) -> tuple[int, ...]:
    """The positions of the parameters of `f` called `names` (as `jax.jit` resolves
    `static_argnames` to positions); none when `f` has no signature."""
    if not names:
        return ()
    try:
        params = list(inspect.signature(f).parameters.values())
    except (TypeError, ValueError):
        return ()
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(i for i, p in enumerate(params) if p.name in names and p.kind in positional)


def static_args(
    args: Sequence, static_argnums: tuple[int, ...], static_argnames: tuple[str, ...]
) -> frozenset[int | str]:
    """The positions (negative ones resolved) and names of a call's static arguments."""
    if not static_argnums and not static_argnames:
        return frozenset()
    n = len(args)
    positions = frozenset(i % n if n and i < 0 else i for i in static_argnums)
    return positions | frozenset(static_argnames)


class Prepared(NamedTuple):
    """One call of a jitted function, ready for JAX: the `jax.jit` function to call (or
    `.lower`) with `args`/`kwargs`, and `finish`, which turns its result into the
    caller's output (writing state back)."""

    fn: Any
    args: tuple
    kwargs: dict
    finish: Callable[[Any], Any]


def positional(fun: Callable, name: str, args: tuple, kwargs: dict) -> tuple:
    """`args` with `kwargs` moved to their positions in `fun`'s signature (as
    `jax.custom_vjp` takes positional arguments only)."""
    if not kwargs:
        return args
    try:
        bound = inspect.signature(fun).bind(*args, **kwargs)
    except TypeError as error:
        raise TypeError(f"`{name}`: {error}") from None
    if bound.kwargs:
        raise TypeError(
            f"`{name}` passes arguments by position; {sorted(bound.kwargs)} are keyword-only "
            "parameters of the function. Make them positional parameters."
        )
    return bound.args
