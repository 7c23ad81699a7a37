"""Filters by named axis: the state whose value has an axis of a given name.

An axis is named where bryo's sharding reads logical axes: a Variable's sharding metadata
(`nnx.with_partitioning`, `sharding_names`, `out_sharding`), else the names its value
carries itself (a `bryo.hax` NamedArray, a Haliax NamedArray: `bryo_graph_logical_axes`).
So one filter serves Flax-style logical axes and named arrays alike:
`split(model, WithAxis('Layers'), ...)` picks every stacked layer array.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, runtime_checkable

from bryo_pytree import Path, path_str

from ._axis_rules import LogicalAxis, _logical_axes, shape_of
from ._variables import Variable


@runtime_checkable
class AxisLike(Protocol):
    """An axis with a name and a size: `bryo.hax.Axis`, `haliax.Axis`."""

    name: str
    size: int


@dataclasses.dataclass(frozen=True, slots=True, init=False)
class WithAxis:
    """Values with an axis named `name`, of `size` when the filter was given an axis.

    A Variable's axes are the logical axes its sharding metadata names (Flax's
    `nnx.with_partitioning(init, ('embed', 'mlp'))`, a dimension with several names
    matches each); without such metadata, the names its value carries itself: a
    `bryo.hax` NamedArray, or, with bryo-backend-haliax, a Haliax NamedArray (the Params
    of a Haliax model carry their array's axis names as sharding metadata). Anything else
    has no named axis.

    Args:
        axis: an axis name (`'Layers'`: any size), or an axis with a name and a size
            (`bryo.hax.Axis('Layers', 4)`, `haliax.Axis('Layers', 4)`: that size only, as
            Haliax compares axes).

    Raises:
        TypeError: `axis` is neither a name nor an axis.

    >>> from bryo_graph import Param, State, VariableState, split_state
    >>> state = State({
    ...     "w": VariableState(Param, jnp.ones((4, 8)), out_sharding=("layers", "mlp")),
    ...     "b": VariableState(Param, jnp.ones(8), out_sharding=("mlp",)),
    ... })
    >>> stacked, rest = split_state(state, WithAxis("layers"), ...)
    >>> sorted(stacked), sorted(rest)
    (['w'], ['b'])
    """

    name: str
    size: int | None

    def __init__(self, axis: str | AxisLike) -> None:
        if isinstance(axis, str):
            name, size = axis, None
        elif isinstance(getattr(axis, "name", None), str) and isinstance(
            getattr(axis, "size", None), int
        ):
            name, size = axis.name, axis.size
        else:
            raise TypeError(
                "`WithAxis` takes an axis name (a str, e.g. 'Layers') or an axis with a name "
                f"and a size (bryo.hax.Axis, haliax.Axis); got {type(axis).__name__}: {axis!r}."
            )
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "size", size)

    def __call__(self, path: Path, value: object) -> bool:
        kind = type(value).__name__ if isinstance(value, Variable) else "the value"
        axes, array = _logical_axes(value, f"{kind} at {path_str(path)}")
        if axes is None:
            return False
        positions = [i for i, entry in enumerate(axes) if _names(entry, self.name)]
        if not positions or self.size is None:
            return bool(positions)
        shape = shape_of(array)
        return shape is not None and any(
            i < len(shape) and shape[i] == self.size for i in positions
        )

    def __repr__(self) -> str:
        return (
            f"WithAxis({self.name!r})"
            if self.size is None
            else (f"WithAxis({self.name!r}, size={self.size})")
        )


def _names(entry: LogicalAxis, name: str) -> bool:
    return entry == name or (isinstance(entry, tuple) and name in entry)
