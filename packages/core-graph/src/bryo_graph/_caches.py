"""The caches of other bryo packages, so that one `clear_caches()` empties them all.

core-graph's own caches (flattenings, compiled GraphDef builders) are cleared by
`clear_caches` directly; packages built on it register a function emptying theirs with
`register_cache` (the lifted transforms' call plans, for instance).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_clearers: list[Callable[[], None]] = []
_lock = threading.Lock()


def register_cache(clear: Callable[[], None]) -> None:
    """Have `bryo_graph.clear_caches()` call `clear` (a function emptying one cache).

    Register module-level functions (registering the same function twice is a no-op):
    the list holds them for the life of the process.
    """
    with _lock:
        if clear not in _clearers:
            _clearers.append(clear)


def clear_registered() -> None:
    """Call every registered cache-clearing function."""
    with _lock:
        clearers = list(_clearers)
    for clear in clearers:
        clear()
