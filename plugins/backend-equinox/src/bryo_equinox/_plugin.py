"""The Equinox backend's hooks: graph node types for `equinox.Module` and friends,
Equinox-style one-argument predicates (`eqx.is_array`) as bryo filters, and module calls
that `make_mox` can see.

The MoX hook is optional: bryo-mox-ir need not be installed for this backend to load.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from bryo_graph import NodeType
from bryo_plugins import hookimpl

from ._filters import value_predicate
from ._mox import intercept
from ._nodes import node_types


@hookimpl
def bryo_graph_node_types() -> Sequence[NodeType]:
    return node_types()


@hookimpl(trylast=True)
def bryo_filter_predicate(filter: object) -> Callable[[tuple, object], bool] | None:
    return value_predicate(filter)


@hookimpl(optionalhook=True)
def bryo_mox_interceptor() -> Callable:
    return intercept
