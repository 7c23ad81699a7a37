"""Typed calls into the filters hook: the only place core-filters asks plugins."""

from __future__ import annotations

from collections.abc import Callable

from bryo_plugins import PluginResultError, first_answer, module_roots

FAMILY = "filters"

PluginPredicate = Callable[[tuple, object], bool]


def plugin_predicate(filter: object) -> PluginPredicate | None:
    """The predicate a plugin makes of `filter`, or None when no plugin knows it.

    Loads the `filters` plugins keyed by the modules of the literal's class first, and
    the rest of the family only when none of those answers.
    """
    answer = first_answer(
        "bryo_filter_predicate",
        _callable_predicate,
        family=FAMILY,
        keys=module_roots(type(filter)),
        filter=filter,
    )
    return None if answer is None else answer.value


def _callable_predicate(predicate: object) -> PluginPredicate:
    if not callable(predicate):
        raise PluginResultError(
            f"expected a predicate `(path, value) -> bool` or None, got {predicate!r}"
        )
    return predicate  # type: ignore[return-value]
