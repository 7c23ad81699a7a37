"""Typed access to core-scan's hooks, with lookup tables cached per plugin-manager epoch.

Nothing else in core-scan asks plugins. The per-type tables are rebuilt only when a
plugin is registered or unregistered, so flattening a tree costs a dict lookup per node;
their plugins (hook family `scan`) load the first time a type of their module shows up.
An axis spec loads the `scan` plugins keyed by its class's module, then those of the
modules already imported, then the rest of the family, until one resolves it (a name such
as `'Time'` is a `str`: bryo_named's plugin answers it, Haliax's is not imported).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import jax

from bryo_graph import is_graph_node, merge, split
from bryo_plugins import (
    PluginResultError,
    TypeTable,
    first_answer_for,
    hook_table,
    type_mapping,
)

from ._types import AxisInfo, BlockSplitter, NamedLeaf, ScanAxisError

V = TypeVar("V")

FAMILY = "scan"

_AXIS_HELP = (
    "Pass an int (a positional axis of plain arrays), or, with the named-axis backend "
    "installed (bryo-backend-named), an axis name such as 'Time' or an Axis('Time', 100)."
)


def _is_named_leaf(handler: object) -> bool:
    return all(callable(getattr(handler, name, None)) for name in ("unbind", "bind", "describe"))


_named_leaves: TypeTable[NamedLeaf[Any]] = TypeTable(
    lambda pm: hook_table(
        "bryo_scan_named_leaves",
        type_mapping(_is_named_leaf, "a `NamedLeaf` (unbind, bind, describe)"),
        pm=pm,
    ),
    family=FAMILY,
)
_block_splitters: TypeTable[BlockSplitter] = TypeTable(
    lambda pm: hook_table(
        "bryo_scan_block_splitters", type_mapping(callable, "a function `split(block)`"), pm=pm
    ),
    family=FAMILY,
)


def _axis_info(answer: object) -> AxisInfo:
    if not isinstance(answer, AxisInfo):
        raise PluginResultError(f"expected a `bryo_scan.AxisInfo` or None, got {answer!r}")
    return answer


def resolve_axis(axis: object) -> AxisInfo:
    """The `AxisInfo` of an axis spec, or a `ScanAxisError` saying what specs work."""
    if isinstance(axis, AxisInfo):
        return axis
    info = first_answer_for("bryo_scan_resolve_axis", _axis_info, family=FAMILY, axis=axis)
    if info is None:
        raise ScanAxisError(f"`axis` {axis!r} is not an axis spec bryo understands. {_AXIS_HELP}")
    return info


def named_leaf_handler(leaf: object) -> NamedLeaf[Any] | None:
    """The `NamedLeaf` handling `leaf`'s type, or None for every other leaf."""
    return _named_leaves.lookup(type(leaf))


def is_named_leaf(node: object) -> bool:
    """`is_leaf` predicate keeping axis-carrying leaves whole while flattening."""
    return _named_leaves.lookup(type(node)) is not None


def block_splitter(block: object) -> BlockSplitter:
    """How to turn `block` into a pytree and back; plain pytrees are their own pytree."""
    found = registered_block_splitter(block)
    return found if found is not None else _split_pytree


def registered_block_splitter(block: object) -> BlockSplitter | None:
    """The splitter a plugin registered for `block`'s type; for a graph node that is not a
    pytree (a backend declared its type with `bryo_graph_node_types` only),
    `split_graph_block`; else None."""
    found = _block_splitters.lookup(type(block))
    if found is None and is_graph_node(block) and _is_pytree_leaf(block):
        return split_graph_block
    return found


def split_graph_block(block: object) -> tuple[Any, Callable[[Any], Any]]:
    """A graph node's `State` (`bryo_graph.split`) and `merge` back: how `Stacked` and
    `scan` take apart a block a backend declared as a graph node only.

    A backend whose blocks are graph nodes needs no `bryo_scan_block_splitters` hook: its
    `bryo_graph_node_types` says all this needs. Returned by a `bryo_scan_block_splitters`
    hook, it makes a block that is also a pytree stack by its Variables instead.

    Example (a block of stacked arrays, one layer):
        >>> tree, rebuild = split_graph_block(block)  # doctest: +SKIP
        >>> rebuild(jax.tree.map(lambda a: a[None], tree))  # doctest: +SKIP
    """
    graphdef, state = split(block)
    return state, functools.partial(merge, graphdef)


def _is_pytree_leaf(value: object) -> bool:
    return jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(value))


def _split_pytree(block: V) -> tuple[V, Callable[[V], V]]:
    return block, _identity


def _identity(tree: V) -> V:
    return tree


def registered_named_leaf_types() -> tuple[type, ...]:
    """Every leaf type some plugin declared through `bryo_scan_named_leaves`."""
    return _named_leaves.types()
