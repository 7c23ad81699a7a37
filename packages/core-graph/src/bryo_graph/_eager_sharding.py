"""Variables created under `jax.set_mesh` are placed by their sharding metadata (Flax 0.12).

A Variable whose metadata names its axes (`out_sharding`, or the older `sharding` /
`sharding_names`: mesh axis names, None, or a `PartitionSpec`; `sharding_rules` pairs map
logical names to mesh axes first) gets its array placed when it is created while a mesh
is set: with Explicit axes by `jax.sharding.reshard`, with Auto axes by
`jax.lax.with_sharding_constraint`. Without a mesh, or for values that are not arrays
(abstract shapes, Python numbers), the value is kept as it is. A name that is neither a
mesh axis nor mapped to one by the rules is an error naming it and the mesh's axes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
from jax.sharding import PartitionSpec

SHARDING_KEYS = ("out_sharding", "sharding", "sharding_names")


def _axes_of(metadata: Mapping[str, object]) -> object:
    for key in SHARDING_KEYS:
        axes = metadata.get(key)
        if axes is not None:
            return axes
    return None


def _mesh_axis(name: object, rules: dict, mesh_axes: tuple, where: str) -> object:
    if name is None or name in mesh_axes:
        return name
    target = rules.get(name, MISSING_RULE)
    if target is not MISSING_RULE:
        return target
    raise ValueError(
        f"{where}: the sharding axis {name!r} is not an axis of the current mesh "
        f"{mesh_axes} and no `sharding_rules` entry maps it to one. Name a mesh axis, or add "
        f"`sharding_rules=(({name!r}, <mesh axis>),)` to the Variable's metadata."
    )


MISSING_RULE = object()


def placed(value: Any, metadata: Mapping[str, object], where: str) -> Any:
    """`value` placed by the sharding metadata when a mesh is set, else `value`."""
    axes = _axes_of(metadata)
    if axes is None or not isinstance(value, jax.Array):
        return value
    mesh = jax.sharding.get_abstract_mesh()
    if mesh is None or not mesh.axis_names:
        return value
    if isinstance(axes, PartitionSpec):
        spec = axes
    else:
        names = tuple(axes) if isinstance(axes, tuple | list) else (axes,)
        rules = dict(metadata.get("sharding_rules") or ())  # type: ignore[call-overload]
        spec = PartitionSpec(*(_mesh_axis(n, rules, mesh.axis_names, where) for n in names))
    if len(spec) > value.ndim:
        raise ValueError(
            f"{where}: the sharding {spec} names {len(spec)} axes for a value of shape "
            f"{value.shape}; give one entry (a mesh axis or None) per axis."
        )
    if mesh.are_all_axes_explicit:
        return jax.sharding.reshard(value, spec)
    return jax.lax.with_sharding_constraint(value, spec)
