"""The NNX-style backend's hooks: `Module` is a mutable, change-tracking graph node."""

from __future__ import annotations

from collections.abc import Sequence

from bryo_graph import NodeType, object_node_type
from bryo_pytree import hookimpl

from ._module import Module


@hookimpl
def bryo_graph_node_types() -> Sequence[NodeType]:
    return (object_node_type(Module),)
