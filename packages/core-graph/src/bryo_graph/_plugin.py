"""core-graph's built-in node types, answered through the same hook as any backend's.

`bryo_graph/__init__.py` registers this module directly (`bryo_plugins.add_builtin`), so
the core works without any entry point.
"""

from __future__ import annotations

from collections.abc import Sequence

from bryo_plugins import hookimpl

from ._graph_state import graph_state_node_type
from ._nodes import NodeType, builtin_node_types
from ._object import Object, object_node_type, tracked_container_node_types
from ._state import state_node_type


@hookimpl
def bryo_graph_node_types() -> Sequence[NodeType]:
    return (
        *builtin_node_types(),
        *tracked_container_node_types(),
        object_node_type(Object),
        state_node_type(),
        graph_state_node_type(),
    )
