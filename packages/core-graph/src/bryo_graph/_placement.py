"""Placement: values on a device mesh, as their logical axes and the rules say.

`get_named_sharding` builds the `NamedSharding`s that `jax.jit` and `jax.device_put`
take, checked against the values' shapes and the mesh; `shard` puts a model's values
there (or constrains them, under a trace); `sharded_init` builds a model directly sharded,
never whole on one device; `make_mesh` lays devices out through `jax.make_mesh`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

import jax
import jax.core
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec

from ._axis_rules import (
    LogicalAxis,
    Rules,
    ShardingError,
    is_object_graph,
    map_units,
    rules_dict,
    shape_of,
    to_mesh_spec,
)
from ._graph import merge, split, state, update
from ._state import State

T = TypeVar("T")

AnyMesh = Mesh | AbstractMesh


# Checked against a mesh ----------------------------------------------------------------------


def _check_mesh(mesh: object) -> AnyMesh:
    if not isinstance(mesh, Mesh | AbstractMesh):
        raise ShardingError(
            f"`mesh` must be a `jax.sharding.Mesh` (e.g. `parse_mesh_spec('data=4,model=2')`); "
            f"got {type(mesh).__name__}."
        )
    return mesh


def _check_fits(
    spec: PartitionSpec,
    shape: tuple[int, ...],
    axes: Sequence[LogicalAxis],
    mesh: AnyMesh,
    where: str,
) -> None:
    sizes = dict(mesh.shape)
    if len(spec) > len(shape):
        raise ShardingError(
            f"the `sharding` of {where} names {len(spec)} axes {tuple(axes)!r}, but its value has "
            f"{len(shape)} dimensions (shape {shape}); give one entry per dimension."
        )
    for dim, (entry, logical) in enumerate(zip(spec, axes, strict=True)):
        mesh_axes = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        for mesh_axis in mesh_axes:
            if mesh_axis not in sizes:
                raise ShardingError(
                    f"the logical axis {logical!r} of {where} maps to the mesh axis "
                    f"{mesh_axis!r}, which the mesh does not have (its axes are "
                    f"{tuple(sizes)}). Fix `rules` or the mesh."
                )
        devices = math.prod(sizes[a] for a in mesh_axes)
        if shape[dim] % devices:
            raise ShardingError(
                f"dimension {dim} of {where} (logical axis {logical!r}, size {shape[dim]}) does "
                f"not divide evenly over the mesh axes {mesh_axes!r} ({devices} devices). Make "
                "the size a multiple, or map that logical axis elsewhere in `rules`."
            )


def get_named_sharding(tree: object, mesh: AnyMesh, rules: Rules | None = None) -> Any:
    """The `NamedSharding` of every value of `tree` on `mesh`, checked against its shape.

    Args:
        tree: a `State` (or any pytree of `VariableState`s and arrays: an Equinox module,
            a `Stacked`), or an NNX-style module (its `state` is used).
        mesh: the device mesh (a `jax.sharding.Mesh`, or an `AbstractMesh` to check only).
        rules: logical name -> mesh axes (see `logical_to_mesh`). Without rules the
            logical names must be the mesh's own axis names.

    Returns:
        The same tree with `NamedSharding`s in place of the values (replicated for arrays
        without sharding metadata, None for non-array values): pass it to
        `jax.device_put`, or as `jax.jit`'s `in_shardings`/`out_shardings`.

    Raises:
        ShardingError: a logical axis without rule, a mesh axis the mesh lacks, more
            logical axes than dimensions, or a dimension that does not divide evenly over
            its mesh axes; the message names the variable's path and the axis.

    Example:
        >>> mesh = parse_mesh_spec("data=2,model=4")                      # doctest: +SKIP
        >>> shardings = get_named_sharding(state, mesh, {"mlp": "model"})  # doctest: +SKIP
        >>> state = jax.device_put(state, shardings)                       # doctest: +SKIP
    """
    mesh = _check_mesh(mesh)
    table = rules_dict(rules)

    def sharding(where: str, axes: tuple[LogicalAxis, ...] | None, value: object) -> object:
        shape = shape_of(value)
        if shape is None:
            return None
        if axes is None:
            return NamedSharding(mesh, PartitionSpec())
        spec = to_mesh_spec(axes, table, where)
        if table is None:
            _check_no_rules_needed(spec, mesh, where)
        _check_fits(spec, shape, axes, mesh, where)
        return NamedSharding(mesh, spec)

    return map_units(tree, sharding)


def _check_no_rules_needed(spec: PartitionSpec, mesh: AnyMesh, where: str) -> None:
    for entry in spec:
        for name in () if entry is None else (entry,) if isinstance(entry, str) else entry:
            if name not in mesh.axis_names:
                raise ShardingError(
                    f"the logical axis {name!r} of {where} is not a mesh axis (the mesh has "
                    f"{tuple(mesh.axis_names)}) and no `rules` were given. Pass `rules` mapping "
                    f"logical names to mesh axes, e.g. `{{{name!r}: {mesh.axis_names[0]!r}}}`."
                )


# Placing models on a mesh --------------------------------------------------------------------


def _has_tracers(tree: object) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(tree))


def shard(tree: T, mesh: AnyMesh, rules: Rules | None = None) -> T:
    """Place `tree`'s values on `mesh` as their sharding metadata says.

    Args:
        tree: a State or pytree of VariableStates/arrays (an Equinox module), or an
            NNX-style module.
        mesh: the mesh, as for `get_named_sharding`.
        rules: the logical-axis rules, as for `get_named_sharding`.

    Returns:
        Outside `jax.jit`, the tree `jax.device_put` on its shardings; inside, the tree with
        `jax.lax.with_sharding_constraint` applied. An NNX-style module is updated in
        place (its Variables get the placed values) and returned.

    Example:
        >>> model = shard(model, mesh, {"embed": None, "mlp": "model"})  # doctest: +SKIP
    """
    node = None
    if is_object_graph(tree):
        node, tree = tree, state(tree)
    shardings = get_named_sharding(tree, mesh, rules)
    if _has_tracers(tree):
        placed = jax.lax.with_sharding_constraint(tree, shardings)
    else:
        placed = jax.device_put(tree, shardings)
    if node is None:
        return placed
    update(node, placed)
    return node


def sharded_init(create: Callable[[], T], mesh: AnyMesh, rules: Rules | None = None) -> T:
    """Build a model directly sharded on `mesh`, never whole on one device.

    `create` is traced twice: under `jax.eval_shape` (no memory), to learn the shapes and
    sharding metadata of its state, then under `jax.jit` with those shardings as
    `out_shardings`, so every device computes only its own shards of the initial values.

    Args:
        create: a function of no arguments building the model (any backend). Make its
            `Rngs` inside it (`lambda: Model(rngs=Rngs(0))`): a closed-over `Rngs` would be
            advanced under a trace.
        mesh: the mesh, as for `get_named_sharding`.
        rules: the logical-axis rules, as for `get_named_sharding`.

    Returns:
        The model, with every array a `jax.Array` sharded on `mesh` (replicated where no
        sharding metadata says otherwise).

    Raises:
        ShardingError: as `get_named_sharding`, before anything is computed.

    Example:
        >>> mesh = parse_mesh_spec("data=2,model=4")  # doctest: +SKIP
        >>> rules = {"mlp": "model", "embed": None}
        >>> model = sharded_init(lambda: MLP(rngs=Rngs(0)), mesh, rules)  # doctest: +SKIP
    """
    traced = trace_init(create, mesh, rules, argument="create")
    model_state = jax.jit(traced.init, out_shardings=traced.shardings)()
    return merge(traced.init.graphdef, model_state)


class StateInit:
    """A model builder as a function returning the model's State; `graphdef` is the
    GraphDef of its last build (its traces' GraphDefs are all alike)."""

    __slots__ = ("__weakref__", "create", "graph", "graphdef")  # jax.jit keeps weak references

    def __init__(self, create: Callable[[], object], graph: bool | None) -> None:
        self.create = create
        self.graph = graph
        self.graphdef: Any = None

    def __call__(self) -> State:
        self.graphdef, model_state = split(self.create(), graph=self.graph)
        return model_state


class TracedInit(NamedTuple):
    """A model builder traced by `jax.eval_shape`: what sharded initialisation needs."""

    init: StateInit
    """The builder, returning the model's State."""
    abstract: State
    """The model's State with `jax.ShapeDtypeStruct` values."""
    shardings: Any
    """The `NamedSharding` of each value (`get_named_sharding` of `abstract`)."""


def trace_init(
    create: Callable[[], object],
    mesh: object,
    rules: Rules | None = None,
    *,
    graph: bool | None = None,
    argument: str,
) -> TracedInit:
    """Trace `create` under `jax.eval_shape` (no memory) and shard its abstract State on
    `mesh` (`sharded_init`'s and `get_abstract_model`'s first step).

    Raises:
        TypeError: `create` is not callable; the message names it as `argument`.
        ShardingError: as `get_named_sharding`, before anything is computed.
    """
    if not callable(create):
        raise TypeError(
            f"`{argument}` must be a function of no arguments that builds the model, e.g. "
            f"`lambda: Model(rngs=Rngs(0))`; got {type(create).__name__}."
        )
    mesh = _check_mesh(mesh)
    init = StateInit(create, graph)
    abstract = jax.eval_shape(init)
    return TracedInit(init, abstract, get_named_sharding(abstract, mesh, rules))


# Meshes --------------------------------------------------------------------------------------


def make_mesh(axes: Mapping[str, int], *, devices: Sequence[Any] | None = None) -> Mesh:
    """A `Mesh` with the named axes and sizes of `axes`, in order, laid out by `jax.make_mesh`.

    The axes are `AxisType.Auto` (sharding follows the rules and the compiler), as a
    `Mesh(devices, names)` has them; `jax.make_mesh` alone makes them `Explicit` on newer
    JAX versions.

    Args:
        axes: axis name -> size, e.g. `{"data": 4, "model": 2}`.
        devices: the devices to lay out (default `jax.devices()`); the mesh uses the first
            `prod(sizes)` of them.

    Returns:
        The `jax.sharding.Mesh`.

    Raises:
        ShardingError: the sizes need more devices than there are, or `jax.make_mesh`
            cannot lay them out on these devices (its reason is in the message).

    Example:
        >>> mesh = make_mesh({"data": 4, "model": 2})   # on 8 devices  # doctest: +SKIP
    """
    names, sizes = tuple(axes), tuple(axes.values())
    devices = list(jax.devices() if devices is None else devices)
    needed = math.prod(sizes)
    if needed > len(devices):
        raise ShardingError(
            f"the mesh {dict(axes)} needs {needed} devices but there are {len(devices)}. On "
            "CPU, set XLA_FLAGS=--xla_force_host_platform_device_count=N before jax starts."
        )
    try:
        return jax.make_mesh(
            sizes, names, axis_types=(AxisType.Auto,) * len(names), devices=devices[:needed]
        )
    except ValueError as error:
        raise ShardingError(
            f"`jax.make_mesh` cannot lay out the mesh {dict(axes)} on these {needed} devices: "
            f"{error}. Use all the devices, or pass `devices=` in an order that fits."
        ) from error
