"""The filters extension point: plugins turn new kinds of filter literals into predicates."""

from __future__ import annotations

from collections.abc import Callable

from bryo_plugins import hookspec


@hookspec(firstresult=True)
def bryo_filter_predicate(filter: object) -> Callable[[tuple, object], bool] | None:
    """Turn `filter`, a literal the core does not know, into a predicate, or return None.

    A predicate is `(path: tuple[Key, ...], value) -> bool`. Return a hashable one (a
    frozen dataclass, say) so that filters built from it can key dicts. The first plugin
    to return a predicate wins. Plugins never see callables: the core decides what a
    callable means (a `(path, value)` predicate, or a one-argument `ValuePredicate`), so
    installing a plugin never changes the meaning of a filter. Reject a malformed literal
    of your own where it is built (its `__init__`), not here: a hook that raises is a
    plugin failure, and the plugin is disabled.

    Family `filters`, keyed by the top-level module of the literal's class (an entry
    point in group `bryo.filters.<module>` loads when such a literal first shows up).
    """
