"""`rearrange`: reorder, split, merge and rename named axes with an einops-like pattern.

Both sides list axes by name; `(a b)` is a group. A name on the left that is missing on the
right pairs, in order, with an unmatched term on the right: a group of new names splits
it (`"block -> (outer inner)"`, sizes given as keywords), a new name renames it; a group on
the left merges its axes into the paired new name (`"(outer inner) -> block"`). `...` on the
right stands for the axes not mentioned; without it they follow the listed ones.

A sequence of axes instead of a pattern reorders: `rearrange(x, ("Time", ...))` puts
"Time" first and keeps the others in order; without `...` it must list every axis. Several
`...` give a partial order, as in Haliax: `(..., "D", "H", ...)` only asks that "D" comes
just before "H".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from ._axis import Axis, AxisError, check_unique, format_axes, order_by_partial
from ._named_array import NamedArray

_TOKEN = re.compile(r"\s*(\(|\)|\.\.\.|[A-Za-z_][A-Za-z0-9_]*)")
_HELP = (
    "Patterns name axes on both sides, e.g. 'a b -> b a', 'block -> (outer inner)' with "
    "outer=4, '(outer inner) -> block', '... a -> a ...'."
)


@dataclass(frozen=True)
class _Term:
    names: tuple[str, ...]
    group: bool

    def __str__(self) -> str:
        return f"({' '.join(self.names)})" if self.group else self.names[0]


_ELLIPSIS = _Term(("...",), False)


def _parse_side(text: str, expression: str) -> list[_Term]:
    terms: list[_Term] = []
    group: list[str] | None = None
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise AxisError(
                f"`expression` {expression!r}: cannot read {text[position:]!r}. {_HELP}"
            )
        token, position = match.group(1), match.end()
        if token == "(":
            if group is not None:
                raise AxisError(f"`expression` {expression!r}: groups cannot nest. {_HELP}")
            group = []
        elif token == ")":
            if not group:
                raise AxisError(f"`expression` {expression!r}: unbalanced or empty group. {_HELP}")
            terms.append(_Term(tuple(group), True))
            group = None
        elif group is not None:
            group.append(token)
        else:
            terms.append(_ELLIPSIS if token == "..." else _Term((token,), False))
    if group is not None:
        raise AxisError(f"`expression` {expression!r}: unclosed group. {_HELP}")
    return terms


def _parse(expression: str) -> tuple[list[_Term], list[_Term]]:
    if expression.count("->") != 1:
        raise AxisError(f"`expression` {expression!r} must have one '->'. {_HELP}")
    left, right = expression.split("->")
    return _parse_side(left, expression), _parse_side(right, expression)


def rearrange(x: Any, expression: Any, **sizes: int) -> Any:
    """Rearrange the named axes of `x` (a NamedArray, or a pytree of them) by a pattern.

    Args:
        x: a NamedArray or a pytree of NamedArrays (`expression` may come first).
        expression: e.g. `"a b -> b a"`, `"block -> (outer inner)"`, `"(outer inner) -> block"`,
            or a sequence of axes (names or `Axis`, at most one `...`) giving the new order.
        **sizes: sizes of new axes from a split (all but one are needed).

    Returns:
        The rearranged array (or pytree).

    Example:
        >>> x = arange(Axis("block", 12))  # doctest: +SKIP
        >>> rearrange(x, "block -> (outer inner)", outer=3).shape  # doctest: +SKIP
        {'outer': 3, 'inner': 4}
    """
    if isinstance(x, str) and not isinstance(expression, str):
        x, expression = expression, x
    if not isinstance(expression, str):
        if sizes:
            raise AxisError(f"`rearrange` by a sequence of axes takes no sizes; got {sizes}.")
        return _map_arrays(lambda array: reorder(array, expression), x)
    return _map_arrays(lambda array: _rearrange_array(array, expression, sizes), x)


def _map_arrays(fn: Any, x: Any) -> Any:
    """`fn` of a NamedArray, or of every NamedArray in a pytree."""
    if isinstance(x, NamedArray):
        return fn(x)
    return jax.tree_util.tree_map(
        lambda leaf: fn(leaf) if isinstance(leaf, NamedArray) else leaf,
        x,
        is_leaf=lambda node: isinstance(node, NamedArray),
    )


def reorder(x: NamedArray, order: Any) -> NamedArray:
    """`x` with its axes in `order`: names or `Axis`, and any number of `...` standing for
    the axes not listed (Haliax's partial orders, see `order_by_partial`)."""
    if not isinstance(order, list | tuple):
        raise AxisError(
            f"`rearrange` takes a pattern string or a sequence of axes and `...`; got {order!r}."
        )
    for item in order:
        if item is not Ellipsis:
            x.position_of(item, "axes")  # a missing axis or a wrong size, named
    axes = order_by_partial(order, x.axes, "axes")
    return NamedArray._wrap(jnp.transpose(x.array, [x.position_of(a.name) for a in axes]), axes)


def _rearrange_array(x: NamedArray, expression: str, sizes: dict[str, int]) -> NamedArray:
    left, right = _parse(expression)
    left_names = [n for t in left if t is not _ELLIPSIS for n in t.names]
    for name in left_names:
        x.position_of(name, "expression")
    right_names = {n for t in right if t is not _ELLIPSIS for n in t.names}
    unmatched_left = [
        t for t in left if t is not _ELLIPSIS and (t.group or t.names[0] not in right_names)
    ]
    unmatched_right = [
        t for t in right if t is not _ELLIPSIS and any(n not in left_names for n in t.names)
    ]
    if len(unmatched_left) != len(unmatched_right):
        raise AxisError(
            f"`expression` {expression!r}: {[str(t) for t in unmatched_left]} on the left "
            "do not pair "
            f"with {[str(t) for t in unmatched_right]} on the right. {_HELP}"
        )
    pairs = dict(zip(map(id, unmatched_right), unmatched_left, strict=True))
    mentioned = set(left_names)
    rest = [a.name for a in x.axes if a.name not in mentioned]
    source: list[str] = []
    out_axes: list[Axis] = []
    for term in right if _ELLIPSIS in right else [*right, _ELLIPSIS]:
        if term is _ELLIPSIS:
            source += rest
            out_axes += [x.resolve_axis(n) for n in rest]
        elif id(term) in pairs:
            partner = pairs[id(term)]
            source += list(partner.names)
            out_axes += _pair_axes(x, partner, term, sizes, expression)
        elif term.group:
            raise AxisError(
                f"`expression` {expression!r}: group {term} needs a partner on the left. {_HELP}"
            )
        else:
            source.append(term.names[0])
            out_axes.append(x.resolve_axis(term.names[0]))
    order = [x.position_of(name) for name in source]
    array = x.array if order == list(range(x.ndim)) else jnp.transpose(x.array, order)
    axes = check_unique(out_axes, "expression")
    return NamedArray._wrap(jnp.reshape(array, tuple(a.size for a in axes)), axes)


def _pair_axes(
    x: NamedArray, left: _Term, right: _Term, sizes: dict[str, int], expression: str
) -> list[Axis]:
    total = math.prod(x.axis_size(n) for n in left.names)
    if not right.group:
        return [Axis(right.names[0], total)]
    if left.group:
        raise AxisError(
            f"`expression` {expression!r}: {left} -> {right} is not a split or a merge. {_HELP}"
        )
    known = {n: sizes[n] for n in right.names if n in sizes}
    unknown = [n for n in right.names if n not in sizes]
    if len(unknown) > 1:
        raise AxisError(
            f"`expression` {expression!r}: give the sizes of {unknown[:-1]} as keywords "
            f"to split {left} (size {total}) into {right}."
        )
    product = math.prod(known.values())
    if unknown:
        if product == 0 or total % product:
            raise AxisError(
                f"`expression` {expression!r}: sizes {known} do not divide axis {left} of size "
                f"{total} (axes {format_axes(x.axes)})."
            )
        known[unknown[0]] = total // product
    elif product != total:
        raise AxisError(f"`expression` {expression!r}: sizes {known} do not multiply to {total}.")
    return [Axis(n, known[n]) for n in right.names]
