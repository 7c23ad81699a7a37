"""Typed calls into the filters hook."""

from __future__ import annotations

from collections.abc import Callable

from bryo_plugins import get_plugin_manager


def plugin_predicate(filter: object) -> Callable[[tuple, object], bool] | None:
    """The predicate a plugin makes of `filter`, or None when no plugin knows it."""
    return get_plugin_manager().hook.bryo_filter_predicate(filter=filter)
