"""The NNX-style backend's hooks: `Module` is a mutable, change-tracking graph node, a
block `Stacked` can stack, and a module whose calls `make_mox` can see.

The scan and MoX hooks are optional: their packages (bryo-core-scan, bryo-mox-ir) need
not be installed for this backend to load.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bryo_graph import NodeType, merge, object_node_type, split
from bryo_plugins import hookimpl

from ._intercept import intercept
from ._module import Module


@hookimpl
def bryo_graph_node_types() -> Sequence[NodeType]:
    return (object_node_type(Module),)


def split_block(block: Module) -> tuple[Any, Callable[[Any], Module]]:
    """A block's state as a pytree, and how to rebuild a block from such a pytree."""
    graphdef, block_state = split(block)
    return block_state, lambda tree: merge(graphdef, tree)


@hookimpl(optionalhook=True)
def bryo_scan_block_splitters() -> Mapping[type, Callable[[Module], tuple]]:
    return {Module: split_block}


@hookimpl(optionalhook=True)
def bryo_mox_interceptor() -> Callable:
    return intercept
