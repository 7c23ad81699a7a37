"""Flax NNX's sharding-metadata helpers: annotated initializers, transformed axes, abstract models.

`with_partitioning` wraps an initializer so the Variable built from its result carries
`out_sharding` (and optionally `mesh`) metadata. Lifted transforms that add or remove an
axis of the state (`vmap`/`scan` with `transform_metadata={PARTITION_NAME: 'layers'}`)
call `add_axis`/`remove_axis`, which keep each Variable's sharding metadata in step with
its value and then call the Variable's own `add_axis`/`remove_axis`. `as_abstract` and
`get_abstract_model` give abstract models (`jax.ShapeDtypeStruct` values) the
`NamedSharding` their metadata describes, for sharded initialisation and checkpoint
restoring.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import jax
from jax.sharding import NamedSharding, PartitionSpec

from bryo_pytree import path_str

from ._axis_rules import check_rank, insert_axis, map_variables, variable_axes
from ._eager_sharding import mesh_of, sharding_key
from ._helpers import map as map_graph
from ._placement import trace_init
from ._state import State
from ._variables import Variable, with_metadata

A = TypeVar("A")
F = TypeVar("F", bound=Callable[..., Any])

PARTITION_NAME = "partition_name"
"""The `transform_metadata` key naming the axis a transform adds (e.g. `'layers'`)."""


def with_partitioning(
    initializer: F, sharding: object, mesh: object = None, **metadata: object
) -> F:
    """`initializer` whose Variable gets `out_sharding=sharding` (and `mesh`) metadata.

    >>> import jax.numpy as jnp
    >>> from bryo_graph import Param
    >>> init = with_partitioning(lambda: jnp.ones((4, 2)), ("embed", None))
    >>> Param(init()).out_sharding
    ('embed', None)

    Args:
        initializer: the function returning the value (an array initializer).
        sharding: one entry per dimension of the value: a mesh or logical axis name, a
            tuple of names, or None (a `PartitionSpec` or `NamedSharding` too).
        mesh: the mesh to place the value on when it is created (default: the mesh set
            by `jax.set_mesh`, if any).
        **metadata: more Variable metadata (e.g. `sharding_rules`).

    Returns:
        The wrapped initializer (see `with_metadata`).
    """
    return with_metadata(initializer, out_sharding=sharding, mesh=mesh, **metadata)  # type: ignore[return-value]  # with_metadata keeps its signature


# Axes added and removed by transforms -----------------------------------------------------


def _partition_name(transform_metadata: Mapping[str, object]) -> tuple[object, dict]:
    if PARTITION_NAME not in transform_metadata:
        raise ValueError(
            f"`transform_metadata` must name the new axis under {PARTITION_NAME!r} (e.g. "
            f"`{{nnx.PARTITION_NAME: 'layers'}}`) to change the Variables' sharding "
            f"metadata; got {dict(transform_metadata)!r}."
        )
    others = {k: v for k, v in transform_metadata.items() if k != PARTITION_NAME}
    return transform_metadata[PARTITION_NAME], others


def _removed(entries: object, index: int, value: object, key: str, where: str) -> tuple:
    items = list(entries)  # type: ignore[call-overload]  # the metadata tuple/list
    if not -len(items) <= index < len(items) or items[index] != value:
        found = items[index] if -len(items) <= index < len(items) else "nothing"
        raise ValueError(
            f"the {key!r} metadata of {where} is {tuple(items)!r}: removing the transformed "
            f"axis expected {value!r} at index {index} but found {found!r}. The state must "
            "come from the same transform (same axis and `transform_metadata`)."
        )
    del items[index]
    return tuple(items)


def _axis_entries(variable: Variable, name: object, others: dict) -> list[tuple[str, object]]:
    """`(metadata key, entry for the transformed axis)` for each tuple metadata to change."""
    entries: list[tuple[str, object]] = []
    key = sharding_key(variable._metadata)
    if key is not None:
        entries.append((key, name))
    for other, value in others.items():
        if other != key and isinstance(variable._metadata.get(other), tuple):
            entries.append((other, value))
    return entries


def add_axis(tree: A, index: int, transform_metadata: Mapping[str, object]) -> A:
    """Record, in every Variable of `tree`, that its value gained an axis at `index`.

    The sharding metadata (`out_sharding`, or the older keys) gets the
    `transform_metadata[PARTITION_NAME]` entry inserted at `index`; every other key of
    `transform_metadata` whose metadata is a tuple gets its value inserted too; then
    `Variable.add_axis(index, name)` is called. Variables are changed in place.

    Args:
        tree: a pytree of Variables (a State, or a module as a pytree).
        index: where the new axis is.
        transform_metadata: `{PARTITION_NAME: name, **other metadata entries}`.

    Returns:
        `tree`.
    """
    name, others = _partition_name(transform_metadata)

    def add(variable: Variable, where: str) -> None:
        for key, entry in _axis_entries(variable, name, others):
            variable.set_metadata(key, insert_axis(variable._metadata[key], index, entry))
        variable.add_axis(index, name)

    return map_variables(tree, add)


def remove_axis(tree: A, index: int, transform_metadata: Mapping[str, object]) -> A:
    """Undo `add_axis`: take the entry at `index` out of the metadata `add_axis` extended,
    checking it is the one `transform_metadata` names, then call `Variable.remove_axis`.

    Raises:
        ValueError: a Variable's metadata has another entry at `index`; the message names
            the Variable's path, the metadata key and both entries.
    """
    name, others = _partition_name(transform_metadata)

    def remove(variable: Variable, where: str) -> None:
        for key, entry in _axis_entries(variable, name, others):
            removed = _removed(variable._metadata[key], index, entry, key, where)
            variable.set_metadata(key, removed)
        variable.remove_axis(index, name)

    return map_variables(tree, remove)


# Abstract models with shardings ------------------------------------------------------------


def as_abstract(tree: A, graph: bool | None = None) -> A:
    """`tree` with each abstract Variable value given the sharding its metadata names.

    A Variable whose value is a `jax.ShapeDtypeStruct` without sharding (as
    `eval_shape` leaves them under Auto meshes) and whose metadata has `out_sharding` gets
    a `ShapeDtypeStruct` with `NamedSharding(mesh, spec)`: the mesh of its `mesh`
    metadata, else the current one (`jax.set_mesh`). Other Variables stay as they are.

    Args:
        tree: a graph node (a module built by `eval_shape`).
        graph: False maps in tree mode.

    Returns:
        A new graph whose Variables are the annotated ones.

    Raises:
        ValueError: a Variable to annotate, with neither `mesh` metadata nor a current
            mesh; the message names its path.
        ShardingError: its sharding metadata names more axes than the value has
            dimensions; the message names its path.
    """

    def annotate(path: tuple, variable: object) -> object:
        if not isinstance(variable, Variable):
            return variable
        value = variable.get_value()
        if (
            not isinstance(value, jax.ShapeDtypeStruct)
            or value.sharding is not None
            or (key := sharding_key(variable._metadata)) is None
        ):
            return variable
        where = f"{type(variable).__name__} at {path_str(path) or 'the root'}"
        mesh = mesh_of(variable._metadata, variable._metadata[key])
        if mesh is None or not mesh.axis_names:
            raise ValueError(
                f"`as_abstract`: {where} has sharding metadata but no mesh to place it on. "
                "Call it under `jax.set_mesh(mesh)`, or give the Variable `mesh` metadata."
            )
        axes = variable_axes(variable, where) or ()
        check_rank(axes, value.shape, where)
        spec = PartitionSpec(*axes)
        sharding = NamedSharding(mesh, spec)
        return variable.replace(jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=sharding))

    return map_graph(annotate, tree, graph=graph)


def get_abstract_model(
    init_fn: Callable[[], Any], mesh: Any, *, graph: bool | None = None
) -> tuple[Any, State]:
    """The GraphDef and abstract State of the model `init_fn` builds, sharded on `mesh`.

    Nothing is computed: `init_fn` is traced by `jax.eval_shape` under `jax.set_mesh(mesh)`,
    and each State leaf becomes a `jax.ShapeDtypeStruct` with the `NamedSharding` its
    metadata gives (replicated without metadata): what a checkpoint restore needs.

    Args:
        init_fn: a function of no arguments building the model.
        mesh: the `jax.sharding.Mesh`.
        graph: False splits in tree mode.

    Returns:
        `(graphdef, abstract_state)`.
    """
    with jax.set_mesh(mesh):
        traced = trace_init(init_fn, mesh, graph=graph, argument="init_fn")
    specs = jax.tree.map(
        lambda value, sharding: jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=sharding),
        traced.abstract,
        traced.shardings,
    )
    return traced.init.graphdef, specs
