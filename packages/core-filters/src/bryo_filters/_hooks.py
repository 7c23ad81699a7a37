"""Typed calls into the filters hook: the only place core-filters asks plugins."""

from __future__ import annotations

from collections.abc import Callable

from bryo_plugins import callable_answer, first_answer_for

FAMILY = "filters"

PluginPredicate = Callable[[tuple, object], bool]

_predicate = callable_answer("a predicate `(path, value) -> bool` or None")


def plugin_predicate(filter: object) -> PluginPredicate | None:
    """The predicate a plugin makes of `filter`, or None when no plugin knows it.

    Loads the `filters` plugins keyed by the modules of the literal's class first, and
    the rest of the family only when none of those answers.
    """
    return first_answer_for("bryo_filter_predicate", _predicate, family=FAMILY, filter=filter)  # type: ignore[return-value]  # _predicate validates that the answer is a PluginPredicate
