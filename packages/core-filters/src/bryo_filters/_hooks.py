"""Typed calls into the filters hook: the only place core-filters asks plugins."""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable

from bryo_plugins import callable_answer, callback_error, first_answer_about
from bryo_pytree import path_str

FAMILY = "filters"

PluginPredicate = Callable[[tuple, object], bool]

_predicate = callable_answer("a predicate `(path, value) -> bool` or None")


def plugin_predicate(filter: object) -> PluginPredicate | None:
    """The predicate a plugin makes of `filter`, or None when no plugin knows it.

    Loads the `filters` plugins keyed by the modules of the literal's class first, and
    the rest of the family only when none of those answers. The predicate is wrapped so
    that one raising (or answering what is no truth value) is named with its plugin.
    """
    answer = first_answer_about("bryo_filter_predicate", _predicate, family=FAMILY, filter=filter)
    if answer is None:
        return None
    return NamedPredicate(answer.value, answer.plugin, filter)  # type: ignore[arg-type]  # validated: callable


@dataclasses.dataclass(frozen=True, eq=False)
class NamedPredicate:
    """A plugin's predicate, equal to and hashing as the predicate itself (filters built
    from it compare as before), which names the plugin and the filter it was made of
    when it fails on a leaf."""

    predicate: PluginPredicate
    plugin: str
    filter: object

    def __eq__(self, other: object) -> bool:
        return self.predicate == (other.predicate if isinstance(other, NamedPredicate) else other)

    def __hash__(self) -> int:
        return hash(self.predicate)

    def __call__(self, path: tuple, value: object) -> bool:
        try:
            result = self.predicate(path, value)
            return result if result.__class__ is bool else bool(result)
        except Exception as error:
            raise callback_error(
                self.predicate,
                role=f"the predicate made of the filter {reprlib.repr(self.filter)}",
                plugin=self.plugin,
                hook="bryo_filter_predicate",
                contract="A predicate `(path, value) -> bool` must answer True or False for "
                "every State leaf (a Variable or a raw value) and its path",
                error=error,
                where=f"on the leaf at {path_str(path)}",
            ) from error

    def __repr__(self) -> str:
        return repr(self.predicate)
