"""The Equinox backend's hooks: graph node types for `equinox.Module` and friends, and
module calls that `make_mox` can see.

bryo loads this plugin lazily, through the entry-point groups `bryo.graph.equinox`,
`bryo.graph.bryo_equinox` and `bryo.mox.equinox` (see pyproject.toml): the first time a
graph lookup meets a class from `equinox` (or this package), or `make_mox` runs while
`equinox` is imported. The MoX hook is optional: bryo-mox-ir need not be installed for
this backend to load (`pip install 'bryo-backend-equinox[mox]'` adds it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from bryo_graph import NodeType
from bryo_plugins import hookimpl

from ._mox import intercept
from ._nodes import node_types


@hookimpl
def bryo_graph_node_types() -> Sequence[NodeType]:
    return node_types()


@hookimpl(optionalhook=True)
def bryo_mox_interceptor() -> Callable:
    return intercept
