"""Equinox's filter vocabulary and bryo's, mixed both ways.

Equinox filters are one-argument predicates on leaves (`eqx.is_array`,
`eqx.is_inexact_array`); bryo filters are predicates on `(path, value)` pairs, plus the
literals of the Filter DSL (`Param`, `'dropout'`, `...`). `ValuePredicate` adapts the
first kind into the second, and the `bryo_filter_predicate` hook applies it to any
callable that takes exactly one positional argument, so `bryo.split(model,
eqx.is_inexact_array, ...)` works. `filter_spec` goes the other way: it turns bryo filters
into a pytree of booleans that `eqx.partition`, `eqx.filter` or `eqx.filter_grad` accept.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import TypeVar

import equinox as eqx
import jax.tree_util as jtu

from bryo_filters import Any as AnyOf
from bryo_filters import Filter, Predicate, to_predicate
from bryo_graph import State, Variable, VariableState, merge, split
from bryo_pytree import Path

T = TypeVar("T")

_EQUINOX_PREDICATES = frozenset(
    {eqx.is_array, eqx.is_array_like, eqx.is_inexact_array, eqx.is_inexact_array_like}
)


@dataclasses.dataclass(frozen=True, slots=True)
class ValuePredicate:
    """A one-argument predicate on leaves, used as a bryo filter on `(path, value)`.

    It sees the raw value: a `VariableState`'s or `Variable`'s `value`, or the leaf.

    >>> import equinox as eqx
    >>> from bryo_graph import Param, VariableState
    >>> is_float = ValuePredicate(eqx.is_inexact_array)
    >>> is_float(("weight",), VariableState(Param, jnp.ones(2)))  # doctest: +SKIP
    True
    """

    predicate: Callable[[object], bool]

    def __call__(self, path: Path, value: object) -> bool:
        if isinstance(value, VariableState):
            value = value.value
        elif isinstance(value, Variable):
            value = value.raw_value
        return bool(self.predicate(value))

    def __repr__(self) -> str:
        name = getattr(self.predicate, "__qualname__", None) or repr(self.predicate)
        return f"ValuePredicate({name})"


def value_predicate(filter: object) -> ValuePredicate | None:
    """`filter` as a `ValuePredicate` if it is a one-argument callable, else None.

    Equinox's own predicates always qualify; another callable qualifies when it can be
    called with one positional argument but not with two (so `(path, value)` predicates
    are left to the core).
    """
    try:
        if filter in _EQUINOX_PREDICATES:
            return ValuePredicate(filter)  # type: ignore[arg-type]
    except TypeError:  # unhashable: not one of Equinox's
        pass
    if isinstance(filter, type) or not callable(filter):
        return None
    try:
        signature = inspect.signature(filter)
    except (TypeError, ValueError):
        return None
    if _accepts(signature, 1) and not _accepts(signature, 2):
        return ValuePredicate(filter)
    return None


def _accepts(signature: inspect.Signature, count: int) -> bool:
    try:
        signature.bind(*range(count))
    except TypeError:
        return False
    return True


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
        if isinstance(leaf, VariableState)
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
