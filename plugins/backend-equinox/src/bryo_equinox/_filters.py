"""bryo filters as Equinox filter specs.

Equinox filters are one-argument predicates on leaves (`eqx.is_array`,
`eqx.is_inexact_array`); bryo's core already takes them as filters (`bryo_filters`
wraps every one-argument callable in a `ValuePredicate`, with or without this backend),
so `bryo.split(model, eqx.is_inexact_array, ...)` works. `filter_spec` goes the other
way: it turns bryo filters into a pytree of booleans that `eqx.partition`, `eqx.filter`
or `eqx.filter_grad` accept.
"""

from __future__ import annotations

from typing import TypeVar

import equinox as eqx
import jax.tree_util as jtu

from bryo_filters import Any as AnyOf
from bryo_filters import Filter, Predicate, to_predicate
from bryo_graph import State, Variable, merge, split

T = TypeVar("T")


class _Mark:
    """A marker leaf: whether a value matched, while the model's structure is rebuilt."""

    __slots__ = ("selected",)

    def __init__(self, selected: bool) -> None:
        self.selected = selected


_YES, _NO = _Mark(True), _Mark(False)


def filter_spec(model: T, /, *filters: Filter) -> T:
    """A pytree of booleans shaped like `model`, True where a bryo filter matches.

    Use it wherever Equinox takes a filter spec: `eqx.partition(model, filter_spec(model,
    Param))`, `eqx.filter(model, spec)`, `eqx.filter_grad(..., filter_spec=...)`. Every
    leaf that is not in bryo's State (functions, Python scalars, static fields) is False.

    Args:
        model: an Equinox model, or any graph bryo can split.
        *filters: bryo filters (`Param`, `BatchStat`, `'tag'`, `PathContains('bias')`,
            `eqx.is_inexact_array`, ...); a value matching any of them is selected.

    Returns:
        A pytree with `model`'s structure and a bool at every leaf.

    Example:
        >>> params, rest = eqx.partition(model, filter_spec(model, Param))  # doctest: +SKIP
    """
    if not filters:
        raise TypeError(
            "`filter_spec` needs at least one filter, e.g. `filter_spec(model, Param)`."
        )
    predicate = _one_predicate(filters)
    graphdef, state = split(model)
    marks = {
        path: leaf.replace(_YES if predicate(path, leaf) else _NO)
        if isinstance(leaf, Variable)
        else (_YES if predicate(path, leaf) else _NO)
        for path, leaf in state.flat_state().items()
    }
    marked = merge(graphdef, State.from_flat_path(marks))
    return jtu.tree_map(lambda leaf: leaf is _YES, marked)


def partition(model: T, /, *filters: Filter) -> tuple[T, T]:
    """`eqx.partition` by bryo filters: `(matching, rest)`, each shaped like `model`.

    Undo it with `eqx.combine(matching, rest)`.

    Args:
        model: an Equinox model.
        *filters: bryo filters; a leaf matching any of them goes to the first tree.

    Returns:
        `(matching, rest)`, with `None` in place of the leaves each one leaves out.

    Example:
        >>> stats, params = partition(model, BatchStat)  # doctest: +SKIP
        >>> model = eqx.combine(stats, params)  # doctest: +SKIP
    """
    return eqx.partition(model, filter_spec(model, *filters))


def _one_predicate(filters: tuple[Filter, ...]) -> Predicate:
    return to_predicate(filters[0]) if len(filters) == 1 else AnyOf(*filters)
