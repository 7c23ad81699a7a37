"""Typed access to core-scan's hooks, with lookup tables cached per plugin-manager epoch.

Nothing else in core-scan touches `pm.hook`. The per-type tables are rebuilt only when a
plugin is registered or unregistered, so flattening a tree costs a dict lookup per node.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TypeVar

from bryo_pytree import BryoPluginManager, get_plugin_manager

from ._types import AxisInfo, BlockSplitter, NamedLeaf, ScanAxisError

V = TypeVar("V")

_AXIS_HELP = (
    "Pass an int (a positional axis of plain arrays), or, with the named-axis backend "
    "installed (bryo-backend-named), an axis name such as 'Time' or an Axis('Time', 100)."
)


class _TypeTable:
    """A type -> value table built from one hook, resolved along the MRO, cached per epoch."""

    def __init__(self, hook_name: str) -> None:
        self._hook_name = hook_name
        self._manager: weakref.ref[BryoPluginManager] | None = None
        self._epoch = -1
        self._declared: dict[type, object] = {}
        self._resolved: dict[type, object | None] = {}

    def _refresh(self) -> None:
        pm = get_plugin_manager()
        if self._manager is not None and self._manager() is pm and pm.epoch == self._epoch:
            return
        declared: dict[type, object] = {}
        for mapping in getattr(pm.hook, self._hook_name)():
            declared.update(mapping or {})
        self._declared, self._resolved = declared, {}
        self._manager, self._epoch = weakref.ref(pm), pm.epoch

    def lookup(self, cls: type) -> object | None:
        self._refresh()
        try:
            return self._resolved[cls]
        except KeyError:
            found = next((self._declared[k] for k in cls.__mro__ if k in self._declared), None)
            self._resolved[cls] = found
            return found

    def types(self) -> tuple[type, ...]:
        self._refresh()
        return tuple(self._declared)


_named_leaves = _TypeTable("bryo_scan_named_leaves")
_block_splitters = _TypeTable("bryo_scan_block_splitters")


def resolve_axis(axis: object) -> AxisInfo:
    """The `AxisInfo` of an axis spec, or a `ScanAxisError` saying what specs work."""
    if isinstance(axis, AxisInfo):
        return axis
    info = get_plugin_manager().hook.bryo_scan_resolve_axis(axis=axis)
    if info is None:
        raise ScanAxisError(f"`axis` {axis!r} is not an axis spec bryo understands. {_AXIS_HELP}")
    return info


def named_leaf_handler(leaf: object) -> NamedLeaf | None:
    """The `NamedLeaf` handling `leaf`'s type, or None for every other leaf."""
    return _named_leaves.lookup(type(leaf))  # type: ignore[return-value]


def is_named_leaf(node: object) -> bool:
    """`is_leaf` predicate keeping axis-carrying leaves whole while flattening."""
    return _named_leaves.lookup(type(node)) is not None


def block_splitter(block: object) -> BlockSplitter:
    """How to turn `block` into a pytree and back; plain pytrees are their own pytree."""
    found = _block_splitters.lookup(type(block))
    return found if found is not None else _split_pytree  # type: ignore[return-value]


def _split_pytree(block: V) -> tuple[V, Callable[[V], V]]:
    return block, _identity


def _identity(tree: V) -> V:
    return tree


def registered_named_leaf_types() -> tuple[type, ...]:
    """Every leaf type some plugin declared through `bryo_scan_named_leaves`."""
    return _named_leaves.types()
