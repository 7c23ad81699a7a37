"""Lookup tables built from hook results, cached per plugin-manager epoch.

Hot paths (flattening a graph, scanning a tree) ask "how does a plugin handle this
type?" once per node. `TypeTable` answers from a dict rebuilt only when a plugin is
registered or unregistered, resolving subclasses along the MRO and memoising the answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from ._manager import BryoPluginManager, get_plugin_manager

V = TypeVar("V")


class TypeTable(Generic[V]):
    """`type -> V` built by `collect(pm)` from the current plugin manager's hooks.

    >>> table = TypeTable(lambda pm: merge_mappings(pm.hook.bryo_scan_named_leaves()))
    >>> table.lookup(NamedArray)  # doctest: +SKIP
    """

    def __init__(self, collect: Callable[[BryoPluginManager], Mapping[type, V]]) -> None:
        self._collect = collect
        self._epoch: int | None = None
        self._declared: dict[type, V] = {}
        self._resolved: dict[type, V | None] = {}

    @property
    def epoch(self) -> int | None:
        """The plugin-manager epoch the table was built for (epochs never repeat)."""
        return self._epoch

    def refresh(self) -> BryoPluginManager:
        """Rebuild the table if the plugins changed; returns the current manager."""
        pm = get_plugin_manager()
        if pm.epoch != self._epoch:
            self._declared = dict(self._collect(pm))
            self._resolved = dict(self._declared)
            self._epoch = pm.epoch
        return pm

    def lookup(self, cls: type) -> V | None:
        """The value for `cls` or its nearest registered base class, else None."""
        self.refresh()
        try:
            return self._resolved[cls]
        except KeyError:
            found = next((self._declared[b] for b in cls.__mro__ if b in self._declared), None)
            self._resolved[cls] = found
            return found

    def types(self) -> tuple[type, ...]:
        """The types the plugins declared."""
        self.refresh()
        return tuple(self._declared)


def merge_mappings(results: list[Mapping[type, V] | None]) -> dict[type, V]:
    """One dict from the mappings several plugins returned (later plugins win)."""
    merged: dict[type, V] = {}
    for mapping in results:
        merged.update(mapping or {})
    return merged
