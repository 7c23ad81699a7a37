"""Haliax-style sharding: an axis mapping from axis names to mesh axes.

A NamedArray's axis names are its logical axes, so one mapping such as
`{"Batch": "data", "Mlp": "model"}` says where every array of a model lives. As in Haliax,
axes the mapping does not name are replicated. These functions are bryo_graph's sharding
(`get_named_sharding`, `shard`) with that default; the plugin's `bryo_graph_logical_axes`
hook lets bryo_graph read NamedArray axis names anywhere (in States, in Variables).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import jax
from jax.sharding import Mesh, PartitionSpec

from bryo_graph import get_named_sharding, get_partition_spec, logical_to_mesh
from bryo_graph import shard as _shard_on_mesh

from ._axis import Axis
from ._named_array import NamedArray

T = TypeVar("T")

AxisMapping = Mapping[str, str | tuple[str, ...] | None]
"""Axis name -> mesh axis, tuple of mesh axes, or None (replicated)."""


def _names_in(tree: object) -> set[str]:
    names: set[str] = set()
    for spec in jax.tree_util.tree_leaves(
        get_partition_spec(tree), is_leaf=lambda x: isinstance(x, PartitionSpec)
    ):
        if isinstance(spec, PartitionSpec):
            for entry in spec:
                names.update((entry,) if isinstance(entry, str) else entry or ())
    return names


def _lenient(mapping: AxisMapping, names: set[str]) -> dict[str, Any]:
    return {**dict.fromkeys(names), **mapping}


def pspec_for_axis(
    axes: NamedArray | Axis | str | Sequence[Axis | str], mapping: AxisMapping
) -> PartitionSpec:
    """The mesh `PartitionSpec` of `axes` (a NamedArray's, or axes/names) under `mapping`.

    Example:
        >>> tuple(pspec_for_axis(("Batch", "Embed"), {"Batch": "data"}))  # a PartitionSpec
        ('data', None)
    """
    if isinstance(axes, NamedArray):
        names = axes.axis_names
    else:
        seq = (axes,) if isinstance(axes, Axis | str) else tuple(axes)
        names = tuple(a.name if isinstance(a, Axis) else a for a in seq)
    return logical_to_mesh(PartitionSpec(*names), _lenient(mapping, set(names)))


def infer_resource_partitions(tree: object, mapping: AxisMapping, mesh: Mesh) -> Any:
    """The `NamedSharding` of every array of `tree` on `mesh` (Haliax's name).

    NamedArrays are sharded by their axis names through `mapping`; Variables with
    `sharding` metadata by those names; other arrays are replicated. Raises bryo_graph's
    `ShardingError` (naming the path and the axis) when a size does not divide its mesh axes.
    """
    return get_named_sharding(tree, mesh, _lenient(mapping, _names_in(tree)))


def shard(tree: T, mapping: AxisMapping, mesh: Mesh) -> T:
    """Place `tree` on `mesh` by axis names (`device_put` outside jit, a constraint inside).

    Example:
        >>> x = shard(x, {"Batch": "data"}, mesh)   # doctest: +SKIP
    """
    return _shard_on_mesh(tree, mesh, _lenient(mapping, _names_in(tree)))
