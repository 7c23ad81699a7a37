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
    BryoPluginManager,
    PluginCallbackError,
    PluginResultError,
    TypeTable,
    callback_error,
    first_answer_for,
    hook_table,
    type_mapping,
)

from ._types import AxisInfo, BlockSplitter, NamedLeaf, Rebuild, ScanAxisError, ScanOutputError

V = TypeVar("V")

FAMILY = "scan"

_AXIS_HELP = (
    "Pass an int (a positional axis of plain arrays), or, with the named-axis backend "
    "installed (bryo-backend-named), an axis name such as 'Time' or an Axis('Time', 100)."
)


def _is_named_leaf(handler: object) -> bool:
    return all(callable(getattr(handler, name, None)) for name in ("unbind", "bind", "describe"))


def _named(
    pm: BryoPluginManager, table: dict[type, Any], owners: dict[type, str], wrap: Any
) -> dict[type, Any]:
    """`table` with each third-party plugin's value wrapped by `wrap(value, plugin, cls)`,
    which names that plugin when the value's functions fail (bryo's own values pass)."""
    named = {}
    for cls, value in table.items():
        source = pm.sources.get(owners[cls])
        named[cls] = value if source is not None and source.builtin else wrap(value, owners[cls])
    return named


def _named_leaf_table(pm: BryoPluginManager) -> dict[type, NamedLeaf[Any]]:
    owners: dict[type, str] = {}
    check = type_mapping(_is_named_leaf, "a `NamedLeaf` (unbind, bind, describe)")
    table = hook_table(_LEAVES, check, pm=pm, owners=owners)
    return _named(pm, table, owners, _NamedLeafOf)


def _block_splitter_table(pm: BryoPluginManager) -> dict[type, BlockSplitter]:
    owners: dict[type, str] = {}
    check = type_mapping(callable, "a function `split(block)`")
    table = hook_table(_SPLITTERS, check, pm=pm, owners=owners)
    return _named(pm, table, owners, _SplitterOf)


_LEAVES, _SPLITTERS = "bryo_scan_named_leaves", "bryo_scan_block_splitters"
_named_leaves: TypeTable[NamedLeaf[Any]] = TypeTable(_named_leaf_table, family=FAMILY)
_block_splitters: TypeTable[BlockSplitter] = TypeTable(_block_splitter_table, family=FAMILY)

_LEAF_CONTRACTS = {
    "unbind": "`unbind(leaf, axis)` must return `(array, position of axis or None, "
    "rebuild)`, or raise saying why the leaf cannot hold that axis",
    "bind": "`bind(element, axis, stacked)` must return the leaf wrapping `stacked`",
    "describe": "`describe(leaf)` must return a short description naming its axes",
}
_SPLIT_CONTRACT = (
    "`split(block)` must return `(pytree, rebuild)`: the block's arrays as a pytree and a "
    "function making a block of such a pytree (stacked or one layer)"
)


# Errors a backend's function raises to tell the user what to change (a named array with
# an axis twice): messages already, they pass as they are (as do those already named).
_OWN_ERRORS = (ScanAxisError, ScanOutputError, PluginCallbackError, RecursionError)


class _NamedLeafOf:
    """A plugin's `NamedLeaf`, whose methods name the plugin when they fail."""

    __slots__ = ("handler", "plugin")

    def __init__(self, handler: NamedLeaf[Any], plugin: str) -> None:
        self.handler = handler
        self.plugin = plugin

    def unbind(self, leaf: Any, axis: AxisInfo | None) -> tuple[jax.Array, int | None, Rebuild]:
        try:
            found = self.handler.unbind(leaf, axis)
        except _OWN_ERRORS:
            raise
        except Exception as error:
            raise self._error("unbind", leaf, error=error) from error
        if not (isinstance(found, tuple) and len(found) == 3 and callable(found[2])):
            raise self._error("unbind", leaf, returned=f"{type(found).__name__} {found!r:.80}")
        return found

    def bind(self, element: Any, axis: AxisInfo, stacked: jax.Array) -> object:
        try:
            return self.handler.bind(element, axis, stacked)
        except _OWN_ERRORS:
            raise
        except Exception as error:
            raise self._error("bind", element, error=error) from error

    def describe(self, leaf: Any) -> str:
        try:
            return self.handler.describe(leaf)
        except _OWN_ERRORS:
            raise
        except Exception as error:
            raise self._error("describe", leaf, error=error) from error

    def _error(
        self, method: str, leaf: object, *, error: Exception | None = None, returned: str = ""
    ) -> PluginCallbackError:
        return callback_error(
            getattr(self.handler, method),
            role=f"the `{method}` of the NamedLeaf for {type(leaf).__qualname__}",
            plugin=self.plugin,
            hook=_LEAVES,
            contract=_LEAF_CONTRACTS[method],
            error=error,
            returned=returned or None,
            where=f"on a {type(leaf).__qualname__}",
            category=ScanAxisError,
        )


class _SplitterOf:
    """A plugin's block splitter (and the rebuilds it returns), naming the plugin when
    they fail."""

    __slots__ = ("plugin", "split")

    def __init__(self, split: BlockSplitter, plugin: str) -> None:
        self.split = split
        self.plugin = plugin

    def __call__(self, block: object) -> tuple[Any, Callable[[Any], object]]:
        try:
            found = self.split(block)
        except _OWN_ERRORS:
            raise
        except Exception as error:
            raise self._error(self.split, "split", block, error=error) from error
        if not (isinstance(found, tuple) and len(found) == 2 and callable(found[1])):
            returned = f"{type(found).__name__} {found!r:.80}"
            raise self._error(self.split, "split", block, returned=returned)
        tree, rebuild = found
        return tree, functools.partial(self._rebuild, rebuild, type(block))

    def _rebuild(self, rebuild: Callable[[Any], object], cls: type, tree: Any) -> object:
        try:
            return rebuild(tree)
        except _OWN_ERRORS:
            raise
        except Exception as error:
            raise self._error(rebuild, "rebuild", cls, error=error) from error

    def _error(
        self,
        function: object,
        role: str,
        block: object,
        *,
        error: Exception | None = None,
        returned: str | None = None,
    ) -> PluginCallbackError:
        cls = block if isinstance(block, type) else type(block)
        return callback_error(
            function,
            role=f"the block splitter's {role} for {cls.__qualname__}",
            plugin=self.plugin,
            hook=_SPLITTERS,
            contract=_SPLIT_CONTRACT,
            error=error,
            returned=returned,
            where=f"on a {cls.__qualname__} block",
            category=TypeError,
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
