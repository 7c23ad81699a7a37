"""core-scan's built-in plugin: ints (and NumPy integers) are positional axes, and
`Stacked`/`BlockSeq` are graph nodes. `bryo_scan/__init__.py` registers it directly."""

from __future__ import annotations

import operator
from collections.abc import Hashable, Sequence
from typing import cast

import numpy as np

from bryo_graph import NodeType
from bryo_plugins import hookimpl
from bryo_pytree import Key

from ._stacked import BlockSeq, Stacked
from ._types import AxisInfo


@hookimpl(trylast=True)
def bryo_scan_resolve_axis(axis: object) -> AxisInfo | None:
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer):
        return None
    return AxisInfo(name=None, size=None, position=operator.index(axis), spec=axis)


def _dataclass_node_type(cls: type, data: tuple[str, ...], static: tuple[str, ...]) -> NodeType:
    """An immutable graph node whose `data` fields are children and `static` fields aux."""

    def flatten(node: object) -> tuple[list[tuple[str, object]], tuple]:
        children = [(name, getattr(node, name)) for name in data]
        return children, tuple(getattr(node, name) for name in static)

    def unflatten(cls: type, aux: Hashable, children: list[tuple[Key, object]]) -> object:
        node = object.__new__(cls)
        for name, value in zip(static, cast(tuple, aux), strict=True):
            object.__setattr__(node, name, value)
        for name, value in children:  # the keys `flatten` gave: field names
            object.__setattr__(node, cast(str, name), value)
        return node

    return NodeType(cls, flatten=flatten, unflatten=unflatten)


@hookimpl
def bryo_graph_node_types() -> Sequence[NodeType]:
    """`Stacked` and `BlockSeq` are graph nodes, so a model holding one (an NNX-style
    trunk, say) splits and merges with the blocks' Variables in its State."""
    return (
        _dataclass_node_type(Stacked, ("stacked",), ("Block", "gradient_checkpointing")),
        _dataclass_node_type(BlockSeq, ("blocks",), ("Block", "gradient_checkpointing")),
    )
