"""Variables created under a mesh are placed by their sharding metadata (Flax 0.12).

A Variable whose metadata names its axes (`out_sharding`, or the older `sharding` /
`sharding_names`: mesh axis names, None, a `PartitionSpec`, a `NamedSharding` or a
`jax.experimental.layout.Format`; `sharding_rules` pairs map logical names to mesh axes
first) gets its array placed when it is created while a mesh is set (`jax.set_mesh`) or
when its `mesh` metadata names one: on a mesh of Explicit axes by
`jax.sharding.reshard`, of Auto axes by `jax.lax.with_sharding_constraint`. Without a
mesh, for values that are not arrays (abstract shapes, Python numbers), with
`eager_sharding=False` in the metadata, or inside `use_eager_sharding(False)`, the value
is kept as it is. A name that is neither a mesh axis nor mapped to one by the rules is an
error naming it and the mesh's axes. `logical_axis_rules` sets rules for a whole block.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import jax
from jax.sharding import NamedSharding, PartitionSpec

SHARDING_KEYS = ("out_sharding", "sharding", "sharding_names")
"""The metadata keys naming a Variable's axes, the Flax 0.12 one first."""


def sharding_key(metadata: Mapping[str, object]) -> str | None:
    """The first of `SHARDING_KEYS` that `metadata` sets (not None), or None."""
    for key in SHARDING_KEYS:
        if metadata.get(key) is not None:
            return key
    return None


def _axes_of(metadata: Mapping[str, object]) -> object:
    key = sharding_key(metadata)
    return None if key is None else metadata[key]


class _EagerSharding(threading.local):
    on: bool = True


_EAGER = _EagerSharding()


class use_eager_sharding:  # Flax's name: a setter that is also a context manager
    """Turn eager sharding of new Variables on or off (on by default), as Flax 0.12.

    Called, it sets the thread's default; used as a context manager, it restores the
    previous default on exit.

    >>> from bryo_graph import use_eager_sharding, using_eager_sharding
    >>> with use_eager_sharding(False):
    ...     using_eager_sharding()
    False
    >>> using_eager_sharding()
    True
    """

    def __init__(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"`use_eager_sharding` takes True or False; got {value!r}.")
        self._previous = _EAGER.on
        _EAGER.on = value

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        _EAGER.on = self._previous


def using_eager_sharding() -> bool:
    """Whether new Variables with sharding metadata are placed on the mesh (see
    `use_eager_sharding`)."""
    return _EAGER.on


class _AxisRules(threading.local):
    rules: tuple[tuple[str, object], ...] = ()


_RULES = _AxisRules()


@contextlib.contextmanager
def logical_axis_rules(rules: Iterable[tuple[str, object]]) -> Iterator[None]:
    """Map logical axis names to mesh axes for the Variables created and read inside.

    Inside, a Variable's sharding names go through these `(logical name, mesh axes)`
    pairs (and then through its own `sharding_rules` metadata, which must agree) when it
    is placed on creation and in `get_partition_spec`/`get_named_sharding`.

    >>> import jax.numpy as jnp
    >>> from bryo_graph import Param, State, get_partition_spec, logical_axis_rules
    >>> with logical_axis_rules([("embed", "model")]):
    ...     spec = get_partition_spec(State({"w": Param(jnp.ones(2), out_sharding=("embed",))}))
    >>> tuple(spec["w"].value)
    ('model',)
    """
    pairs = tuple(rules)
    for pair in pairs:
        if not (isinstance(pair, tuple | list) and len(pair) == 2 and isinstance(pair[0], str)):
            raise ValueError(
                "`logical_axis_rules` takes `(logical name, mesh axes)` pairs, e.g. "
                f"`[('embed', 'model'), ('batch', 'data')]`; got the entry {pair!r}."
            )
    previous = _RULES.rules
    _RULES.rules = tuple((name, target) for name, target in pairs)
    try:
        yield
    finally:
        _RULES.rules = previous


def axis_rules_for(metadata: Mapping[str, object], where: str) -> dict[str, Any]:
    """The rules mapping a Variable's sharding names: the current `logical_axis_rules`
    with its own `sharding_rules` metadata on top (an entry they disagree on is an error)."""
    rules = dict(_RULES.rules)
    for name, target in metadata.get("sharding_rules") or ():  # type: ignore[attr-defined]  # (name, target) pairs
        if name in rules and rules[name] != target:
            raise ValueError(
                f"{where}: its `sharding_rules` map {name!r} to {target!r} but the current "
                f"`logical_axis_rules` map it to {rules[name]!r}; make them agree or drop one."
            )
        rules[name] = target
    return rules


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


def mesh_of(metadata: Mapping[str, object], axes: object) -> Any:
    """The mesh a Variable's values go on: its `NamedSharding`'s, else its `mesh` metadata,
    else the current one (`jax.set_mesh`; an empty abstract mesh when none is set)."""
    if isinstance(axes, NamedSharding):
        return axes.mesh
    mesh = metadata.get("mesh")
    if mesh is not None:
        return mesh
    return jax.sharding.get_abstract_mesh()


def _check_axis_types(mesh: Any, where: str) -> None:
    if not (mesh.are_all_axes_explicit or mesh.are_all_axes_auto):
        raise ValueError(
            f"{where}: eager sharding needs a mesh whose axes are all Explicit or all Auto; "
            f"this mesh mixes them ({dict(zip(mesh.axis_names, mesh.axis_types, strict=True))}). "
            "Use one axis type, or pass `eager_sharding=False` and place the value yourself."
        )


def placed(value: Any, metadata: Mapping[str, object], where: str) -> Any:
    """`value` placed by the sharding metadata when a mesh is known, else `value`."""
    axes = _axes_of(metadata)
    if axes is None or not isinstance(value, jax.Array):
        return value
    if not metadata.get("eager_sharding", _EAGER.on):
        return value
    if not isinstance(axes, PartitionSpec | NamedSharding | tuple | list | str):
        return jax.lax.with_sharding_constraint(value, axes)  # a `Format` (layout)
    mesh = mesh_of(metadata, axes)
    if mesh is None or not mesh.axis_names:
        return value
    _check_axis_types(mesh, where)
    spec = _spec(axes, metadata, mesh, where)
    if len(spec) > value.ndim:
        raise ValueError(
            f"{where}: the sharding {spec} names {len(spec)} axes for a value of shape "
            f"{value.shape}; give one entry (a mesh axis or None) per axis."
        )
    sharding: object = spec
    if isinstance(axes, NamedSharding):
        sharding = axes
    elif isinstance(mesh, jax.sharding.Mesh):  # a concrete mesh from the `mesh` metadata
        sharding = NamedSharding(mesh, spec)
    if mesh.are_all_axes_explicit:
        return jax.sharding.reshard(value, sharding)
    return jax.lax.with_sharding_constraint(value, sharding)


def _spec(axes: object, metadata: Mapping[str, object], mesh: Any, where: str) -> PartitionSpec:
    if isinstance(axes, NamedSharding):
        return axes.spec
    if isinstance(axes, PartitionSpec):
        return axes
    names = tuple(axes) if isinstance(axes, tuple | list) else (axes,)
    rules = axis_rules_for(metadata, where)
    return PartitionSpec(*(_mesh_axis(n, rules, mesh.axis_names, where) for n in names))
