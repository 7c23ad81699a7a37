"""The graph extension point: backends describe how their node types flatten and rebuild."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from bryo_plugins import hookspec

from ._nodes import NodeType


@hookspec
def bryo_graph_node_types() -> Sequence[NodeType]:
    """Return the `NodeType`s this plugin knows: how each node type flattens into
    `(key, child)` pairs and is rebuilt, whether it is mutable (NNX-style objects with
    shared references) or immutable (Equinox-style pytrees), and what kind of `Variable`
    its raw array leaves stand for. See `bryo_graph.NodeType` for the contract.
    """


@hookspec
def bryo_graph_logical_axes() -> Mapping[type, Callable[[object], Sequence[str | None]]]:
    """Value types that carry their own axis names, each with `value -> names` (one per
    dimension, None for an unnamed one). Sharding reads these names as the value's logical
    axes when its Variable has no `sharding` metadata (a named-axis backend's arrays).
    Called once per plugin-manager epoch; the mappings of all plugins are merged.
    """
