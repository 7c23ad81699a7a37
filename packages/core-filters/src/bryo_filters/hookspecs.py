"""The filters extension point: plugins turn new kinds of filter literals into predicates."""

from __future__ import annotations

from collections.abc import Callable

from bryo_plugins import hookspec


@hookspec(firstresult=True)
def bryo_filter_predicate(filter: object) -> Callable[[tuple, object], bool] | None:
    """Turn `filter`, a literal the core does not know, into a predicate, or return None.

    A predicate is `(path: tuple[Key, ...], value) -> bool`. Return a hashable one (a
    frozen dataclass, say) so that filters built from it can key dicts. The first plugin
    to return a predicate wins. Plugins see plain callables before the core treats them as
    predicates, so a backend can adapt its own one-argument predicates (`eqx.is_array`).
    """
