"""Sharding: logical axis names on Variables, mapped onto a device mesh by rules.

A Variable names the logical axes of its value in its `sharding` metadata
(`Param(w, sharding=('embed', 'mlp'))`), and one mapping per run, the *rules*
(`{'embed': None, 'mlp': 'model', 'batch': 'data'}`), says on which mesh axes each logical
axis lives. The model's code thus says what its axes mean, the launch says where they go.
`get_partition_spec` reads the logical specs of a State, `logical_to_mesh` maps them
through the rules, `get_named_sharding` builds the `NamedSharding`s that `jax.jit` and
`jax.device_put` take, checked against the values' shapes, and `sharded_init` builds a
model directly sharded on a mesh. `parse_mesh_spec('data=4,model=2')` makes the mesh.

Values that carry their own axis names (a named-axis backend's arrays) take part through
the `bryo_graph_logical_axes` hook: their names are their logical axes, so a Haliax-style
axis mapping is simply the rules.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import jax
import numpy as np
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec

from bryo_plugins import TypeTable, merge_mappings
from bryo_pytree import Path, key_to_plain, path_str

from ._graph import merge, split, state, update
from ._nodes import is_graph_node
from ._state import State
from ._variables import Variable, VariableState

T = TypeVar("T")

SHARDING_KEY = "sharding"
"""The metadata key holding a Variable's logical axis names."""

LogicalAxis = str | tuple[str, ...] | None
"""One dimension's logical name(s): a name, several names, or None (not sharded)."""

MeshAxes = str | tuple[str, ...] | None
"""What a rule maps a logical name to: a mesh axis, several mesh axes, or None (replicated)."""

Rules = Mapping[str, MeshAxes] | Sequence[tuple[str, MeshAxes]]
"""Logical name -> mesh axes, as a mapping or as `(name, mesh_axes)` pairs."""

AnyMesh = Mesh | AbstractMesh

_RULES_HELP = (
    "Give `rules` an entry for it: a mesh axis name (`{{{axis!r}: 'model'}}`), a tuple of "
    "mesh axes, or None to replicate it (`{{{axis!r}: None}}`)."
)


class ShardingError(ValueError):
    """Sharding metadata, rules or a mesh spec that cannot shard a value."""


# Walking a tree of VariableStates, Variables and arrays ---------------------------------------


# type -> `value -> axis names`, from the `bryo_graph_logical_axes` hook.
_value_axes: TypeTable[Callable[[Any], Sequence[str | None]]] = TypeTable(
    lambda pm: merge_mappings(pm.hook.bryo_graph_logical_axes())
)


def _is_unit(node: object) -> bool:
    """Leaves of the sharding walk: VariableStates, Variables, and values with own axes."""
    return isinstance(node, VariableState | Variable) or _value_axes.lookup(type(node)) is not None


def _shape_of(value: object) -> tuple[int, ...] | None:
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple) and hasattr(value, "dtype"):
        return shape
    leaves = jax.tree_util.tree_leaves(value)
    if len(leaves) == 1 and leaves[0] is not value:
        return _shape_of(leaves[0])
    return None


def _path_of(keypath: tuple) -> Path:
    path: list = []
    for key in keypath:
        plain = key_to_plain(key)
        path.extend(plain if isinstance(plain, tuple) else (plain,))  # State keys are paths
    return tuple(path)


def _describe(unit: object, keypath: tuple) -> str:
    kind = unit.type.__name__ if isinstance(unit, VariableState | Variable) else "the value"
    return f"{kind} at {path_str(_path_of(keypath))}"


def _check_axes(axes: object, where: str) -> tuple[LogicalAxis, ...]:
    entries = (axes,) if isinstance(axes, str) else axes
    ok = isinstance(entries, tuple | list) and all(
        entry is None
        or isinstance(entry, str)
        or (isinstance(entry, tuple) and all(isinstance(name, str) for name in entry))
        for entry in entries
    )
    if not ok:
        raise ShardingError(
            f"the `sharding` metadata of {where} must be a tuple with one entry per dimension "
            f"of its value, each a logical axis name, a tuple of names, or None; got {axes!r}."
        )
    return tuple(entries)  # type: ignore[arg-type]


def _logical_axes(unit: object, where: str) -> tuple[tuple[LogicalAxis, ...] | None, object]:
    """`(logical axes or None, value)` of one unit of the walk."""
    if isinstance(unit, VariableState | Variable):
        axes = unit._metadata.get(SHARDING_KEY)
        value = unit.value
        if axes is not None:
            return _check_axes(axes, where), value
    else:
        value = unit
    reader = _value_axes.lookup(type(value))
    if reader is not None:
        return tuple(reader(value)), value
    return None, value


def _is_object_graph(tree: object) -> bool:
    """A graph node that JAX sees as a leaf (an NNX-style Object): read through `state`.
    Pytree nodes (Equinox modules, dataclasses, States) are mapped as pytrees, so the
    result has their structure and fits `jax.device_put` and `jax.jit` directly."""
    if isinstance(tree, VariableState | Variable) or not is_graph_node(tree):
        return False
    return jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(tree))


def _map_units(
    tree: object, fn: Callable[[str, tuple[LogicalAxis, ...] | None, object], object]
) -> object:
    """Apply `fn(where, logical_axes, value)` to each unit of `tree`; a VariableState keeps
    its type and metadata around the result, a Variable or bare value is replaced."""
    if _is_object_graph(tree):
        tree = state(tree)

    def one(keypath: tuple, unit: object) -> object:
        where = _describe(unit, keypath)
        axes, value = _logical_axes(unit, where)
        result = fn(where, axes, value)
        return unit.replace(result) if isinstance(unit, VariableState) else result

    return jax.tree_util.tree_map_with_path(one, tree, is_leaf=_is_unit)


# Logical specs -------------------------------------------------------------------------------


def get_partition_spec(tree: object) -> Any:
    """The logical `PartitionSpec` of every value of `tree`, in `tree`'s shape.

    Args:
        tree: a `State` (or any pytree of `VariableState`s and arrays: an Equinox module,
            a `Stacked`), or an NNX-style module (its `state` is used).

    Returns:
        The same tree with each value replaced: `PartitionSpec(*sharding)` for a value with
        `sharding` metadata (or with axis names of its own, through a backend), `PartitionSpec()`
        (replicated) for other arrays, and None for values that are not arrays. VariableStates
        stay VariableStates (their metadata unchanged), so the result has the State's tree
        structure and serves as `jax.jit`'s `in_shardings`/`out_shardings` once mapped.

    Example:
        >>> state = State({"w": VariableState(Param, jnp.ones((4, 8)), sharding=("embed", "mlp"))})
        >>> get_partition_spec(state)["w"].value  # doctest: +SKIP
        P('embed', 'mlp')
    """

    def spec(where: str, axes: tuple[LogicalAxis, ...] | None, value: object) -> object:
        if axes is not None:
            return PartitionSpec(*axes)
        return PartitionSpec() if _shape_of(value) is not None else None

    return _map_units(tree, spec)


def _rules_dict(rules: Rules | None) -> dict[str, MeshAxes] | None:
    if rules is None:
        return None
    pairs = rules.items() if isinstance(rules, Mapping) else rules
    table: dict[str, MeshAxes] = {}
    for pair in pairs:
        if not (isinstance(pair, tuple | list) and len(pair) == 2 and isinstance(pair[0], str)):
            raise ShardingError(
                f"`rules` must map logical axis names to mesh axes (a dict, or `(name, "
                f"mesh_axes)` pairs); got the entry {pair!r}."
            )
        name, target = pair
        if not (
            target is None
            or isinstance(target, str)
            or (isinstance(target, tuple) and all(isinstance(a, str) for a in target))
        ):
            raise ShardingError(
                f"`rules` maps {name!r} to {target!r}; map it to a mesh axis name, a tuple of "
                "mesh axis names, or None (replicated)."
            )
        table.setdefault(name, target)  # the first rule for a name wins, as in Flax
    return table


def _mesh_axes_of(name: str, rules: dict[str, MeshAxes] | None, where: str) -> tuple[str, ...]:
    if rules is None:
        return (name,)
    if name not in rules:
        raise ShardingError(
            f"the logical axis {name!r} of {where} has no mesh mapping in `rules` (its names "
            f"are {sorted(rules)}). " + _RULES_HELP.format(axis=name)
        )
    target = rules[name]
    return () if target is None else (target,) if isinstance(target, str) else tuple(target)


def _to_mesh_spec(
    axes: Sequence[LogicalAxis], rules: dict[str, MeshAxes] | None, where: str
) -> PartitionSpec:
    entries: list[str | tuple[str, ...] | None] = []
    used: dict[str, str] = {}
    for entry in axes:
        names = () if entry is None else (entry,) if isinstance(entry, str) else entry
        mesh_axes: list[str] = []
        for name in names:
            for mesh_axis in _mesh_axes_of(name, rules, where):
                if mesh_axis in used:
                    raise ShardingError(
                        f"{where} would be sharded twice over the mesh axis {mesh_axis!r}: "
                        f"its logical axes {used[mesh_axis]!r} and {name!r} both map to it. "
                        "Map one of them to another mesh axis or to None in `rules`."
                    )
                used[mesh_axis] = name
                mesh_axes.append(mesh_axis)
        entries.append(
            None if not mesh_axes else mesh_axes[0] if len(mesh_axes) == 1 else tuple(mesh_axes)
        )
    return PartitionSpec(*entries)


def logical_to_mesh(spec_tree: T, rules: Rules) -> T:
    """Map the logical `PartitionSpec`s of `spec_tree` onto mesh axes through `rules`.

    Args:
        spec_tree: the result of `get_partition_spec` (or any tree of `PartitionSpec`s, bare
            or inside `VariableState`s).
        rules: logical axis name -> mesh axis name, tuple of mesh axes, or None
            (replicated); a dict or `(name, mesh_axes)` pairs (the first pair for a name
            wins). Every logical name must have a rule.

    Returns:
        The same tree with mesh-axis `PartitionSpec`s.

    Raises:
        ShardingError: a logical axis has no rule, or two logical axes of one value map to
            the same mesh axis; the message names the value's path and the axis.

    Example:
        >>> logical_to_mesh(PartitionSpec("embed", "mlp"), {"embed": None, "mlp": "model"})
        P(None, 'model')
    """
    table = _rules_dict(rules)

    def one(keypath: tuple, node: object) -> object:
        where = _describe(node, keypath)
        if isinstance(node, VariableState):
            value = node.value
            return (
                node.replace(_to_mesh_spec(value, table, where))
                if isinstance(value, PartitionSpec)
                else node
            )
        if isinstance(node, PartitionSpec):
            return _to_mesh_spec(node, table, where)
        return node

    is_leaf = lambda x: isinstance(x, PartitionSpec | VariableState)
    return jax.tree_util.tree_map_with_path(one, spec_tree, is_leaf=is_leaf)


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
    table = _rules_dict(rules)

    def sharding(where: str, axes: tuple[LogicalAxis, ...] | None, value: object) -> object:
        shape = _shape_of(value)
        if shape is None:
            return None
        if axes is None:
            return NamedSharding(mesh, PartitionSpec())
        spec = _to_mesh_spec(axes, table, where)
        if table is None:
            _check_no_rules_needed(spec, mesh, where)
        _check_fits(spec, shape, axes, mesh, where)
        return NamedSharding(mesh, spec)

    return _map_units(tree, sharding)


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
        mesh, rules: as for `get_named_sharding`.

    Returns:
        Outside `jax.jit`, the tree `jax.device_put` on its shardings; inside, the tree with
        `jax.lax.with_sharding_constraint` applied. An NNX-style module is updated in
        place (its Variables get the placed values) and returned.

    Example:
        >>> model = shard(model, mesh, {"embed": None, "mlp": "model"})  # doctest: +SKIP
    """
    node = None
    if _is_object_graph(tree):
        node, tree = tree, state(tree)  # type: ignore[assignment]
    shardings = get_named_sharding(tree, mesh, rules)
    if _has_tracers(tree):
        placed = jax.lax.with_sharding_constraint(tree, shardings)
    else:
        placed = jax.device_put(tree, shardings)
    if node is None:
        return placed
    update(node, placed)
    return node  # type: ignore[return-value]


def sharded_init(create: Callable[[], T], mesh: AnyMesh, rules: Rules | None = None) -> T:
    """Build a model directly sharded on `mesh`, never whole on one device.

    `create` is traced twice: under `jax.eval_shape` (no memory), to learn the shapes and
    sharding metadata of its state, then under `jax.jit` with those shardings as
    `out_shardings`, so every device computes only its own shards of the initial values.

    Args:
        create: a function of no arguments building the model (any backend). Make its
            `Rngs` inside it (`lambda: Model(rngs=Rngs(0))`): a closed-over `Rngs` would be
            advanced under a trace.
        mesh, rules: as for `get_named_sharding`.

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
    if not callable(create):
        raise TypeError(
            f"`create` must be a function of no arguments that builds the model, e.g. "
            f"`lambda: Model(rngs=Rngs(0))`; got {type(create).__name__}."
        )
    mesh = _check_mesh(mesh)
    graphdefs: list = []

    def init() -> State:
        graphdef, model_state = split(create())
        graphdefs.append(graphdef)
        return model_state

    abstract = jax.eval_shape(init)
    shardings = get_named_sharding(abstract, mesh, rules)
    model_state = jax.jit(init, out_shardings=shardings)()
    return merge(graphdefs[-1], model_state)


def add_sharding_axis(tree: T, index: int, name: LogicalAxis = None) -> T:
    """Insert a logical axis at `index` into the sharding metadata of every Variable.

    For state that gained an axis, e.g. blocks stacked on a new leading layers axis:
    `('embed', 'mlp')` becomes `(None, 'embed', 'mlp')` with `index=0, name=None`.
    Values without sharding metadata are left alone.

    Args:
        tree: a pytree of VariableStates (returned changed), or an NNX-style module
            (its Variables are changed in place, and the module returned).
        index: where the new axis goes (negative counts from the end, as for `insert`).
        name: its logical name, or None (not sharded).

    Returns:
        The tree with the metadata changed.
    """

    def insert(axes: tuple, where: str) -> tuple:
        axes = _check_axes(axes, where)
        position = index if index >= 0 else len(axes) + 1 + index
        return (*axes[:position], name, *axes[position:])

    if _is_object_graph(tree):
        from ._graph import iter_graph

        for path, node in list(iter_graph(tree)):
            if isinstance(node, Variable) and node._metadata.get(SHARDING_KEY) is not None:
                node.sharding = insert(
                    node._metadata[SHARDING_KEY], f"{node.type.__name__} at {path_str(path)}"
                )
        return tree

    def one(keypath: tuple, leaf: object) -> object:
        if (
            isinstance(leaf, VariableState | Variable)
            and leaf._metadata.get(SHARDING_KEY) is not None
        ):
            axes = insert(leaf._metadata[SHARDING_KEY], _describe(leaf, keypath))
            if isinstance(leaf, Variable):
                leaf.sharding = axes
                return leaf
            return leaf.replace(**{SHARDING_KEY: axes})
        return leaf

    is_leaf = lambda x: isinstance(x, VariableState | Variable)
    return jax.tree_util.tree_map_with_path(one, tree, is_leaf=is_leaf)


# Meshes --------------------------------------------------------------------------------------

_AXIS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def parse_mesh_spec(spec: str, devices: Sequence[Any] | None = None) -> Mesh:
    """A `Mesh` from a spec such as `"data=4,model=2"` (as `bryo demo --mesh` takes).

    Args:
        spec: comma-separated `name=size` parts, in mesh order. One size may be `-1`: that
            axis takes the devices the others leave.
        devices: the devices to lay out (default `jax.devices()`, all processes' devices
            in a multi-process run). The mesh uses the first `prod(sizes)` of them.

    Returns:
        A `jax.sharding.Mesh` with those axis names and sizes.

    Raises:
        ShardingError: a malformed part (named in the message), a repeated name, or more
            devices asked for than there are.

    Example:
        >>> mesh = parse_mesh_spec("data=4,model=2")   # on 8 devices  # doctest: +SKIP
        >>> dict(mesh.shape)                                           # doctest: +SKIP
        {'data': 4, 'model': 2}
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ShardingError(
            f"`spec` must be a string of `name=size` parts such as 'data=4,model=2'; got {spec!r}."
        )
    names: list[str] = []
    sizes: list[int] = []
    for part in spec.split(","):
        name, size = _parse_part(part, spec)
        if name in names:
            raise ShardingError(f"the mesh spec {spec!r} names the axis {name!r} twice.")
        names.append(name)
        sizes.append(size)
    devices = list(jax.devices() if devices is None else devices)
    sizes = _fill_inferred(sizes, names, len(devices), spec)
    needed = math.prod(sizes)
    if needed > len(devices):
        raise ShardingError(
            f"the mesh spec {spec!r} needs {needed} devices but there are {len(devices)}. On "
            "CPU, set XLA_FLAGS=--xla_force_host_platform_device_count=N before jax starts."
        )
    return Mesh(_device_grid(devices[:needed], sizes), tuple(names))


def _parse_part(part: str, spec: str) -> tuple[str, int]:
    name, sep, size_text = part.strip().partition("=")
    name, size_text = name.strip(), size_text.strip()
    if not sep or not _AXIS_NAME.match(name):
        raise ShardingError(
            f"the part {part.strip()!r} of the mesh spec {spec!r} is not `name=size` with a "
            "Python identifier as name (e.g. 'data=4')."
        )
    try:
        size = int(size_text)
    except ValueError:
        size = 0
    if size < 1 and size != -1:
        raise ShardingError(
            f"the part {part.strip()!r} of the mesh spec {spec!r} needs a positive integer size "
            "(or -1 for 'the remaining devices')."
        )
    return name, size


def _fill_inferred(sizes: list[int], names: list[str], n_devices: int, spec: str) -> list[int]:
    inferred = [i for i, size in enumerate(sizes) if size == -1]
    if not inferred:
        return sizes
    if len(inferred) > 1:
        raise ShardingError(
            f"the mesh spec {spec!r} has more than one size -1; at most one axis can be inferred."
        )
    known = math.prod(size for size in sizes if size != -1)
    if n_devices % known:
        raise ShardingError(
            f"the mesh spec {spec!r}: {n_devices} devices do not divide evenly by {known}, "
            f"so the axis {names[inferred[0]]!r}=-1 cannot be inferred."
        )
    return [n_devices // known if size == -1 else size for size in sizes]


def _device_grid(devices: list, sizes: list[int]) -> np.ndarray:
    try:
        from jax.experimental import mesh_utils

        return mesh_utils.create_device_mesh(sizes, devices=devices)
    except Exception:  # topology-unaware fallback (e.g. a subset of the devices)
        return np.array(devices, dtype=object).reshape(sizes)
