"""`BoundedCache`: a thread-safe mapping that keeps its most recently used entries."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class BoundedCache(Generic[V]):
    """At most `size` entries; `get` and `put` make an entry the most recently used, and
    `put` drops the least recently used beyond `size`. Safe to share between threads.

    For caches of traces keyed by what was traced (a scan step by its input structure,
    an equation `loads` rebuilt by its content): bounded, so that a process seeing ever
    new keys keeps a fixed amount.
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a BoundedCache holds at least 1 entry; got size={size}.")
        self.size = size
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Hashable) -> V | None:
        """The entry of `key` (now the most recently used), or None."""
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: Hashable, value: V) -> None:
        """Keep `value` for `key`, dropping the least recently used entries beyond `size`."""
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
