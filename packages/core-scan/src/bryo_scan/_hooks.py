"""Typed access to core-scan's hooks, with lookup tables cached per plugin-manager epoch.

Nothing else in core-scan touches `pm.hook`. The per-type tables are rebuilt only when a
plugin is registered or unregistered, so flattening a tree costs a dict lookup per node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from bryo_plugins import TypeTable, get_plugin_manager, merge_mappings

from ._types import AxisInfo, BlockSplitter, NamedLeaf, ScanAxisError

V = TypeVar("V")

_AXIS_HELP = (
    "Pass an int (a positional axis of plain arrays), or, with the named-axis backend "
    "installed (bryo-backend-named), an axis name such as 'Time' or an Axis('Time', 100)."
)


def _table(hook_name: str) -> TypeTable[object]:
    """A type table over one of core-scan's mapping hooks."""
    return TypeTable(lambda pm: merge_mappings(getattr(pm.hook, hook_name)()))


_named_leaves = _table("bryo_scan_named_leaves")
_block_splitters = _table("bryo_scan_block_splitters")


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


def registered_block_splitter(block: object) -> BlockSplitter | None:
    """The splitter a plugin registered for `block`'s type, or None."""
    return _block_splitters.lookup(type(block))  # type: ignore[return-value]


def _split_pytree(block: V) -> tuple[V, Callable[[V], V]]:
    return block, _identity


def _identity(tree: V) -> V:
    return tree


def registered_named_leaf_types() -> tuple[type, ...]:
    """Every leaf type some plugin declared through `bryo_scan_named_leaves`."""
    return _named_leaves.types()
