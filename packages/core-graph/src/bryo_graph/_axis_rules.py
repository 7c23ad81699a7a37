"""Logical axes: which named axes a value has, and on which mesh axes the rules put them.

A Variable names the logical axes of its value in its `sharding` metadata
(`Param(w, sharding=('embed', 'mlp'))`), and one mapping per run, the *rules*
(`{'embed': None, 'mlp': 'model', 'batch': 'data'}`), says on which mesh axes each logical
axis lives. The model's code thus says what its axes mean, the launch says where they go.
`get_partition_spec` reads the logical specs of a State, `logical_to_mesh` maps them
through the rules, and `add_sharding_axis` fixes the metadata of state that gained an
axis. Placing values on devices is `_placement`'s job.

Values that carry their own axis names (a named-axis backend's arrays) take part through
the `bryo_graph_logical_axes` hook: their names are their logical axes, so a Haliax-style
axis mapping is simply the rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import jax
from jax.sharding import NamedSharding, PartitionSpec

from bryo_plugins import PluginCallbackError, TypeTable, callback_error, hook_table, type_mapping
from bryo_pytree import Path, key_to_plain, path_str

from ._eager_sharding import axis_rules_for, sharding_key
from ._errors import GraphError
from ._graph import iter_graph, state
from ._nodes import node_type_of
from ._variables import Variable

T = TypeVar("T")

SHARDING_KEY = "sharding"
"""The metadata key holding a Variable's logical axis names."""

LogicalAxis = str | tuple[str, ...] | None
"""One dimension's logical name(s): a name, several names, or None (not sharded)."""

MeshAxes = str | tuple[str, ...] | None
"""What a rule maps a logical name to: a mesh axis, several mesh axes, or None (replicated)."""

Rules = Mapping[str, MeshAxes] | Sequence[tuple[str, MeshAxes]]
"""Logical name -> mesh axes, as a mapping or as `(name, mesh_axes)` pairs."""

_RULES_HELP = (
    "Give `rules` an entry for it: a mesh axis name (`{{{axis!r}: 'model'}}`), a tuple of "
    "mesh axes, or None to replicate it (`{{{axis!r}: None}}`)."
)


class ShardingError(ValueError):
    """Sharding metadata, rules or a mesh spec that cannot shard a value."""


# Walking a tree of VariableStates, Variables and arrays ---------------------------------------


def _declared_axes(pm: Any) -> dict[type, Callable[[Any], Sequence[str | None]]]:
    global _axes_owners
    owners: dict[type, str] = {}
    check: Any = type_mapping(callable, "a function `value -> names`")
    table: dict[type, Callable[[Any], Sequence[str | None]]]
    table = hook_table(_AXES_HOOK, check, pm=pm, owners=owners)
    _axes_owners = owners
    return table


_AXES_HOOK = "bryo_graph_logical_axes"
# type -> `value -> axis names`, from the `bryo_graph_logical_axes` hook, and the plugin
# of each type (the table built last), to name when its function fails.
_value_axes: TypeTable[Callable[[Any], Sequence[str | None]]] = TypeTable(
    _declared_axes, family="graph"
)
_axes_owners: dict[type, str] = {}


def _axes_error(reader: object, value: object, where: str, error: Exception) -> Exception:
    """The error naming the plugin whose `value -> names` function raised `error`."""
    owner = next((_axes_owners[b] for b in type(value).__mro__ if b in _axes_owners), None)
    return callback_error(
        reader,
        role=f"the logical axes function for {type(value).__qualname__}",
        plugin=owner,
        hook=_AXES_HOOK,
        contract="`value -> names` must return one axis name (or None) per dimension",
        error=error,
        where=f"while reading the axes of {where}",
    )


def _is_unit(node: object) -> bool:
    """Leaves of the sharding walk: VariableStates, Variables, and values with own axes."""
    return isinstance(node, Variable) or _value_axes.lookup(type(node)) is not None


def shape_of(value: object) -> tuple[int, ...] | None:
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple) and hasattr(value, "dtype"):
        return shape
    leaves = jax.tree_util.tree_leaves(value)
    if len(leaves) == 1 and leaves[0] is not value:
        return shape_of(leaves[0])
    return None


def _path_of(keypath: tuple) -> Path:
    path: list = []
    for key in keypath:
        plain = key_to_plain(key)
        path.extend(plain if isinstance(plain, tuple) else (plain,))  # State keys are paths
    return tuple(path)


def describe(unit: object, keypath: tuple) -> str:
    kind = unit.type.__name__ if isinstance(unit, Variable) else "the value"
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
    return tuple(entries)  # type: ignore[arg-type]  # checked above


def variable_axes(variable: Variable, where: str) -> tuple[LogicalAxis, ...] | None:
    """The axes a Variable's sharding metadata names (`out_sharding`, or the older
    `sharding`/`sharding_names`), its own `sharding_rules` applied; None without any."""
    metadata = variable._metadata
    key = sharding_key(metadata)
    if key is None:
        return None
    axes = metadata[key]
    if isinstance(axes, NamedSharding):
        axes = axes.spec
    axes = _check_axes(tuple(axes) if isinstance(axes, PartitionSpec) else axes, where)
    table = axis_rules_for(metadata, where)
    if table:
        axes = tuple(table.get(a, a) if isinstance(a, str) else a for a in axes)
    return axes


def _logical_axes(unit: object, where: str) -> tuple[tuple[LogicalAxis, ...] | None, object]:
    """`(logical axes or None, value)` of one unit of the walk."""
    if isinstance(unit, Variable):
        axes = variable_axes(unit, where)
        value = unit.value
        if axes is not None:
            return axes, value
    else:
        value = unit
    reader = _value_axes.lookup(type(value))
    if reader is not None:
        try:
            return tuple(reader(value)), value
        except (GraphError, PluginCallbackError, RecursionError):
            raise
        except Exception as error:  # (free until it catches) name the plugin
            raise _axes_error(reader, value, where, error) from error
    return None, value


def logical_axes(value: object) -> tuple[LogicalAxis, ...] | None:
    """The logical axes of one value, one entry per dimension, or None if it names none.

    A Variable's are those its sharding metadata names (`out_sharding`, `sharding` or
    `sharding_names`, its `sharding_rules` applied); otherwise, or for a bare value, the
    names the value carries itself through a backend (`bryo_graph_logical_axes`: a
    `bryo.hax` or Haliax NamedArray). Each entry is a name, a tuple of names or None.

    Raises:
        ShardingError: a Variable's sharding metadata is not a tuple of names.

    Example:
        >>> from bryo_graph import Param
        >>> logical_axes(Param(jnp.ones((2, 3)), out_sharding=("embed", None)))
        ('embed', None)
        >>> logical_axes(jnp.ones(2)) is None
        True
    """
    return _logical_axes(value, "the value")[0]


def is_object_graph(tree: object) -> bool:
    """A mutable graph node (an NNX-style Object): read through `state`. Immutable nodes
    and other pytrees (Equinox modules, dataclasses, States) are mapped as pytrees, so the
    result has their structure and fits `jax.device_put` and `jax.jit` directly."""
    if isinstance(tree, Variable):
        return False
    node_type = node_type_of(tree)
    return node_type is not None and node_type.mutable


def map_units(
    tree: object, fn: Callable[[str, tuple[LogicalAxis, ...] | None, object], object]
) -> object:
    """Apply `fn(where, logical_axes, value)` to each unit of `tree`; a VariableState keeps
    its type and metadata around the result, a Variable or bare value is replaced."""
    if is_object_graph(tree):
        tree = state(tree)

    def one(keypath: tuple, unit: object) -> object:
        where = describe(unit, keypath)
        axes, value = _logical_axes(unit, where)
        result = fn(where, axes, value)
        return unit.replace(result) if isinstance(unit, Variable) else result

    return jax.tree_util.tree_map_with_path(one, tree, is_leaf=_is_unit)


# Logical specs -------------------------------------------------------------------------------


def get_partition_spec(tree: object) -> Any:
    """The logical `PartitionSpec` of every value of `tree`, in `tree`'s shape.

    Args:
        tree: a `State` (or any pytree of `VariableState`s and arrays: an Equinox module,
            a `Stacked`), or an NNX-style module (its `state` is used).

    Raises:
        ShardingError: sharding metadata naming more axes than its value has dimensions;
            the message names the Variable's path.

    Returns:
        The same tree with each value replaced: `PartitionSpec(*sharding)` for a value with
        `sharding` metadata (or with axis names of its own, through a backend), `PartitionSpec()`
        (replicated) for other arrays, and None for values that are not arrays. VariableStates
        stay VariableStates (their metadata unchanged), so the result has the State's tree
        structure and serves as `jax.jit`'s `in_shardings`/`out_shardings` once mapped.

    Example:
        >>> from bryo_graph import Param, State, VariableState
        >>> state = State({"w": VariableState(Param, jnp.ones((4, 8)), sharding=("embed", "mlp"))})
        >>> tuple(get_partition_spec(state)["w"].value)  # a PartitionSpec
        ('embed', 'mlp')
    """

    def spec(where: str, axes: tuple[LogicalAxis, ...] | None, value: object) -> object:
        shape = shape_of(value)
        if axes is not None:
            check_rank(axes, shape, where)
            return PartitionSpec(*axes)
        return PartitionSpec() if shape is not None else None

    return map_units(tree, spec)


def check_rank(axes: Sequence[object], shape: tuple[int, ...] | None, where: str) -> None:
    """Refuse sharding metadata naming more axes than the value has dimensions."""
    if shape is not None and len(axes) > len(shape):
        raise ShardingError(
            f"the sharding metadata of {where} names {len(axes)} axes {tuple(axes)!r}, but its "
            f"value has {len(shape)} dimensions (shape {shape}); give one entry (a name or "
            "None) per dimension."
        )


def rules_dict(rules: Rules | None) -> dict[str, MeshAxes] | None:
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


def to_mesh_spec(
    axes: Sequence[LogicalAxis] | PartitionSpec, rules: dict[str, MeshAxes] | None, where: str
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
    table = rules_dict(rules)

    def one(keypath: tuple, node: object) -> object:
        where = describe(node, keypath)
        if isinstance(node, Variable):
            value = node.value
            return (
                node.replace(to_mesh_spec(value, table, where))
                if isinstance(value, PartitionSpec)
                else node
            )
        if isinstance(node, PartitionSpec):
            return to_mesh_spec(node, table, where)
        return node

    is_leaf = lambda x: isinstance(x, PartitionSpec | Variable)
    return jax.tree_util.tree_map_with_path(one, spec_tree, is_leaf=is_leaf)


def insert_axis(entries: Sequence[object], index: int, entry: object) -> tuple:
    """`entries` (one per dimension) with `entry` for a new axis at `index`, padded with
    None when `index` is past the end (Flax NNX's rule).

    A negative `index` counts from the end of the result, as the value's new axis does
    (`-1`: the last entry); Flax's `list.insert` would put it one place early.
    """
    items = list(entries)
    position = index if index >= 0 else len(items) + 1 + index
    items.extend([None] * (position - len(items)))
    items.insert(position, entry)
    return tuple(items)


def map_variables(tree: T, fn: Callable[[Variable, str], None]) -> T:
    """Call `fn(variable, where)` on every Variable of the pytree `tree` (`where` names it
    and its path, for error messages); returns `tree`."""

    def one(keypath: tuple, leaf: object) -> object:
        if isinstance(leaf, Variable):
            fn(leaf, describe(leaf, keypath))
        return leaf

    return jax.tree_util.tree_map_with_path(one, tree, is_leaf=lambda x: isinstance(x, Variable))


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

    def insert_into(variable: Variable, where: str) -> None:
        key = sharding_key(variable._metadata)
        if key is not None:
            axes = variable._metadata[key]
            axes = _check_axes(tuple(axes) if isinstance(axes, PartitionSpec) else axes, where)
            variable.set_metadata(key, insert_axis(axes, index, name))

    if is_object_graph(tree):
        for path, node in list(iter_graph(tree)):
            if isinstance(node, Variable):
                insert_into(node, f"{node.type.__name__} at {path_str(path)}")
        return tree
    return map_variables(tree, insert_into)
