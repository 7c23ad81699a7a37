"""Extension points of core-scan: axis specs, axis-carrying leaves and stackable blocks.

Core-scan knows plain JAX arrays and pytrees only. A named-axis backend resolves names
and `Axis` objects and explains how its arrays hold an axis; a graph-style backend (mutable
modules) explains how its blocks become pytrees so that `Stacked` can stack them. Each
hook answers once per call or per plugin-manager epoch, never per array element.

Hook family `scan`: a backend's entry point goes in group `bryo.scan.<module>` for the
top-level module its leaf and block types (and axis objects) come from; it is imported
the first time such a type or axis spec shows up, and with the whole family when an axis
spec is not resolved otherwise (a name such as `'Time'`). Mapping answers are merged by
`bryo_plugins.hook_table`: for a type two plugins declare, the plugin called first wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bryo_plugins import hookspec

from ._types import AxisInfo, BlockSplitter, NamedLeaf


@hookspec(firstresult=True)
def bryo_scan_resolve_axis(axis: object) -> AxisInfo | None:
    """Resolve an axis spec given to `scan`, `fold`, `map`, `vmap` or `Stacked`.

    Return an `AxisInfo` for a spec this plugin understands (core-scan answers for
    ints; the named backend for names and `Axis` objects), or None to pass.
    Example: `"Time"` -> `AxisInfo(name="Time", size=None)`.
    """


@hookspec
def bryo_scan_named_leaves() -> Mapping[type, NamedLeaf[Any]]:
    """Leaf types that carry their own axes, each with the `NamedLeaf` that handles it.

    Called once per plugin-manager epoch; the mappings of all plugins are merged and
    subclasses find their base class's handler. Example: `{NamedArray: NamedArrayLeaf()}`.
    """
    ...


@hookspec
def bryo_scan_block_splitters() -> Mapping[type, BlockSplitter]:
    """Block types that are not plain pytrees, each with its `split(block)` function.

    `split(block)` returns `(pytree, rebuild)`: the block's state as a pytree of arrays
    and a function rebuilding a block from such a pytree (stacked or sliced). Blocks of
    any other type are pytrees themselves (Equinox modules, dataclasses) and are stacked
    as they are, or graph nodes that are not pytrees (a backend's `bryo_graph_node_types`
    declares them), stacked by their State (`bryo_scan.split_graph_block`): a graph
    backend needs this hook only to split its blocks some other way. Called once per
    plugin-manager epoch, merged like `bryo_scan_named_leaves`.
    """
    ...
