"""The graph extension point: backends describe how their node types flatten and rebuild."""

from __future__ import annotations

from collections.abc import Sequence

from bryo_pytree import hookspec

from ._nodes import NodeType


@hookspec
def bryo_graph_node_types() -> Sequence[NodeType]:
    """Return the `NodeType`s this plugin knows: how each node type flattens into
    `(key, child)` pairs and is rebuilt, whether it is mutable (NNX-style objects with
    shared references) or immutable (Equinox-style pytrees), and what kind of `Variable`
    its raw array leaves stand for. See `bryo_graph.NodeType` for the contract.
    """
