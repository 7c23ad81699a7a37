"""Node types: how each kind of graph node flattens into children and is rebuilt.

The core knows nothing of any backend. Every node type, even `dict`, `list` and
`tuple`, arrives through the `bryo_graph_node_types` hook as a `NodeType` (core-graph's
own through its built-in plugin). Lookups go through a table rebuilt only when the plugin
manager's epoch changes, so traversals never call pluggy per node; the first lookup of a
type loads the `graph` plugins keyed by the modules of its MRO (a backend's entry point in
`bryo.graph.equinox` loads when an `equinox` class first shows up).
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Callable, Container, Hashable, Iterable, Mapping, Sequence
from typing import Any, Generic, NoReturn, TypeVar

import jax

from bryo_plugins import (
    BryoPluginManager,
    PluginCallbackError,
    PluginResultError,
    TypeTable,
    callback_error,
    get_plugin_manager,
    hook_table,
)
from bryo_pytree import Key, key_to_plain

from ._errors import GraphError
from ._tracking import structure_changed as structure_changed  # the backends' spelling

Children = Iterable[tuple[Key, object]]

N = TypeVar("N")
"""The node class a `NodeType` describes: its functions only ever get nodes of that class."""


@dataclasses.dataclass(frozen=True)
class NodeType(Generic[N]):
    """How bryo's graph functions treat one type of node.

    Attributes:
        type: the node's class; subclasses use it too unless they have their own.
        flatten: `node -> (children, aux)`: `children` are `(key, child)` pairs in a stable
            order, `aux` is hashable static data kept in the GraphDef.
        unflatten: immutable nodes: `(type, aux, children) -> node`, children a list of
            `(key, child)` pairs already rebuilt.
        create: mutable nodes: `(type, aux) -> empty node`; children then go in through
            `init_key`. Mutable nodes can take part in reference cycles.
        init_key: `(node, key, child)`, fills one child of a node made by `create` (a node
            nobody else sees yet: no change tracking needed).
        init_items: optional, `(node, [(key, child), ...])`, fills all children of a node
            made by `create` at once (faster than one `init_key` call per child).
        set_key: `(node, key, child)`, sets one child of a live node in place (used by
            `update` for raw array leaves); a tracked node reports the change.
        pop_key: `(node, key)`, removes one child in place (used by `pop`).
        set_aux: optional, `(node, aux)`: makes a live node that a graph-mode update reuses
            in place take the aux of the node that stands for it (an `Object`'s
            `data`/`static` statuses), before its children are set; None: the aux is kept
            only by the nodes `create` makes.
        leaf_type: the `Variable` class that a raw array child of this node stands for in a
            State (Equinox arrays are `Param`s); None keeps the parent's choice.
        leaf_metadata: optional, `node -> metadata or None`: the metadata of the Variables
            its raw array children stand for in a State, read from the node (Equinox's view
            of a Haliax `NamedArray` names its array's axes: `{'out_sharding': ('Mlp',
            'Embed')}`); it must depend only on the node's aux, which a cached flattening
            keeps. Children that stay raw in a State (in an NNX-style object) carry none.
        tracks_structure: the backend calls `bryo_graph.structure_changed(node)` on every
            structural change of such a node (attribute set or delete), so flattening a
            graph made only of such and immutable nodes can be cached. The node must
            have a `__dict__` (bryo keeps its watches there, see `_tracking`), or call
            `structure_changed()` without a node, which expires every cached flattening.
        static_keys: optional, `node -> container of keys or None`: the keys whose
            children are static values kept in the GraphDef as they are, never walked
            into (an `Object`'s static attributes, such as a plain list of ints). Every
            other child that is not a Variable or a node is then data, a State leaf even
            when it is not an array (`data(1)`); None: arrays are leaves, the rest static.
        unchanged: optional, `node -> bool`, for an immutable node type whose nodes can
            still change under bryo without telling it (Equinox empties an `eqx.nn.State`
            that `state.set` used): whether `flatten(node)` would still give what it gave.
            bryo calls it on each such node before reusing a cached flattening that holds
            it (a cache hit, a lifted transform's call plan); False makes bryo walk the
            graph again, so `flatten` sees the node as it is now (and may raise). It must
            be cheap (an attribute read) and never raise; None: the node never changes.
    """

    type: builtins.type[N]
    flatten: Callable[[N], tuple[Children, Hashable]]
    unflatten: Callable[[builtins.type[N], Hashable, list[tuple[Key, object]]], object] | None = (
        None
    )
    create: Callable[[builtins.type[N], Hashable], object] | None = None
    init_key: Callable[[N, Key, object], None] | None = None
    init_items: Callable[[N, list[tuple[Key, object]]], None] | None = None
    set_key: Callable[[N, Key, object], None] | None = None
    pop_key: Callable[[N, Key], None] | None = None
    set_aux: Callable[[N, Hashable], None] | None = None
    leaf_type: builtins.type | None = None
    leaf_metadata: Callable[[N], Mapping[str, object] | None] | None = None
    tracks_structure: bool = False
    static_keys: Callable[[N], Container[Key] | None] | None = None
    unchanged: Callable[[N], bool] | None = None

    @property
    def mutable(self) -> bool:
        """Whether nodes are built empty and filled in place (and can form cycles)."""
        return self.create is not None

    @property
    def cacheable(self) -> bool:
        """Whether a graph of such nodes can keep its flattening between changes."""
        return self.tracks_structure or (not self.mutable and self.set_key is None)


def _node_type_entries(answer: object) -> list[tuple[type, NodeType]]:
    """A plugin's `bryo_graph_node_types` answer as table entries; garbage is rejected."""
    if isinstance(answer, NodeType | str | bytes) or not isinstance(answer, Iterable):
        raise PluginResultError(f"expected a sequence of `NodeType`s, got {answer!r}")
    entries = []
    for node_type in answer:
        if not isinstance(node_type, NodeType) or not isinstance(node_type.type, type):
            raise PluginResultError(
                f"expected `bryo_graph.NodeType`s (with a class as `type`), got {node_type!r}"
            )
        _check_complete(node_type)
        entries.append((node_type.type, node_type))
    return entries


_FUNCTIONS = (
    "flatten",
    "unflatten",
    "create",
    "init_key",
    "init_items",
    "set_key",
    "pop_key",
    "set_aux",
    "leaf_metadata",
    "static_keys",
    "unchanged",
)


def _check_complete(node_type: NodeType) -> None:
    """Refuse, where the plugin answers, a node type bryo could not rebuild nodes with: it
    would fail later inside `merge` with "'NoneType' object is not callable"."""
    name = f"NodeType({node_type.type.__module__}.{node_type.type.__qualname__})"
    for field in _FUNCTIONS:
        value = getattr(node_type, field)
        if value is not None and not callable(value):
            raise PluginResultError(f"{name}: `{field}` must be a function, got {value!r}")
    if node_type.flatten is None:
        raise PluginResultError(f"{name}: `flatten` is required, `node -> (children, aux)`")
    if (node_type.unflatten is None) == (node_type.create is None):
        raise PluginResultError(
            f"{name}: give exactly one of `unflatten` (immutable nodes, rebuilt from their "
            "children) and `create` (mutable nodes, made empty and filled in place); it has "
            f"{'both' if node_type.create is not None else 'neither'}."
        )
    if node_type.create is not None and node_type.init_key is None:
        raise PluginResultError(
            f"{name}: a mutable node type (with `create`) needs `init_key(node, key, child)` "
            "to fill the nodes `create` makes (`init_items` is an optional faster path)."
        )
    if node_type.leaf_type is not None and not isinstance(node_type.leaf_type, type):
        raise PluginResultError(
            f"{name}: `leaf_type` must be a `bryo_graph.Variable` class (`Param`), got "
            f"{node_type.leaf_type!r}"
        )


def _declared_node_types(pm: BryoPluginManager) -> dict[type, NodeType]:
    global _suppliers
    owners: dict[type, str] = {}
    table = hook_table("bryo_graph_node_types", _node_type_entries, pm=pm, owners=owners)
    _suppliers = {cls: (node_type, owners[cls]) for cls, node_type in table.items()}
    return table


# `type -> (NodeType, plugin name)` of the table built last: which plugin to name when a
# function of a node type fails (`node_callback_failed`); swapped whole, never mutated.
_suppliers: dict[type, tuple[NodeType, str]] = {}

# What each function of a `NodeType` must do: the fix a failure's message gives.
_CONTRACTS = {
    "flatten": "`flatten(node)` must return `(children, aux)`: a list of `(key, child)` "
    "pairs in a stable order and hashable static data (a tuple, a string, None; never a "
    "list, a dict or an array)",
    "unflatten": "`unflatten(cls, aux, children)` must return the node of class `cls` "
    "rebuilt from `aux` and `children`, a list of `(key, child)` pairs",
    "create": "`create(cls, aux)` must return a new, empty node of class `cls` (its "
    "children then go in through `init_key`)",
    "init_key": "`init_key(node, key, child)` must put `child` under `key` of a node `create` made",
    "init_items": "`init_items(node, items)` must put each `(key, child)` of `items` into "
    "a node `create` made",
    "set_key": "`set_key(node, key, child)` must set the child under `key` of a live node",
    "pop_key": "`pop_key(node, key)` must remove the child under `key` of a live node",
    "set_aux": "`set_aux(node, aux)` must give a live node the static data `aux`",
    "static_keys": "`static_keys(node)` must return a container of the keys whose children "
    "are static (a set, a frozenset), or None",
    "leaf_metadata": "`leaf_metadata(node)` must return a mapping of Variable metadata "
    "(`{'out_sharding': ('embed', None)}`) or None",
    "unchanged": "`unchanged(node)` must return whether `flatten(node)` would still give "
    "what it gave, cheaply, without raising",
}


def node_callback_failed(
    node_type: NodeType,
    field: str,
    where: str,
    *,
    error: BaseException | None = None,
    returned: str | None = None,
    unchanged: str = "Your model is unchanged.",
) -> NoReturn:
    """Raise the error for `node_type`'s function `field` that raised `error` (raise this
    inside the `except` clause that caught it) or answered `returned`: it names the
    plugin that declared the node type, the function, `where` bryo called it (the node's
    path) and the contract, chaining `error`. Errors that are messages already pass as
    they are: a `GraphError` the function raised (its backend telling the user what to
    change), one a nested call named, and those of bryo's own node types (of its
    built-in plugins)."""
    if isinstance(error, PluginCallbackError | GraphError | RecursionError):
        raise error
    supplied = _suppliers.get(node_type.type)
    plugin = supplied[1] if supplied is not None and supplied[0] is node_type else None
    pm = get_plugin_manager()
    source = pm.sources.get(plugin) if plugin is not None else None
    if error is not None and (node_type is JAX_PYTREE or (source is not None and source.builtin)):
        raise error
    cls = node_type.type
    raise callback_error(
        getattr(node_type, field),
        role=f"the `{field}` of NodeType({cls.__module__}.{cls.__qualname__})",
        plugin=plugin,
        hook="bryo_graph_node_types",
        contract=_CONTRACTS[field],
        error=error,
        returned=returned,
        where=where,
        unchanged=unchanged,
        category=GraphError,
        pm=pm,
    ) from error


_registry: TypeTable[NodeType] = TypeTable(_declared_node_types, family="graph")


def node_types() -> TypeTable[NodeType]:
    """The current registry, refreshed if plugins changed since the last call."""
    _registry.refresh()
    return _registry


def node_type_of(value: object) -> NodeType | None:
    """The NodeType for `value`, or None when it is a leaf."""
    return node_types().lookup(type(value))


def is_graph_node(value: object) -> bool:
    """Whether bryo's graph functions traverse into `value`."""
    return node_type_of(value) is not None


def builtin_node_types() -> Sequence[NodeType]:
    """dict, list and tuple, and `JaxPytree`: the only node types the core itself knows."""
    return (
        NodeType(
            dict,
            flatten=dict_flatten,
            unflatten=lambda cls, aux, children: _rebuild_dict(cls, children),
            set_key=_setitem,
            pop_key=_delitem,
        ),
        NodeType(
            list,
            flatten=lambda node: (enumerate(node), None),
            unflatten=lambda cls, aux, children: _rebuild_list(cls, children),
            set_key=_setitem,
        ),
        NodeType(
            tuple,
            flatten=_tuple_flatten,
            unflatten=lambda cls, aux, children: _rebuild_tuple(cls, children),
        ),
        JAX_PYTREE,
    )


class JaxPytree:
    """The node type of a JAX pytree that a node holds as data without knowing it as a
    graph node (`self.tree = data(SomeDataclass(...))`): as Flax NNX 0.12 does in graph
    mode, bryo walks it one level at a time, its leaves become State leaves, and it is
    rebuilt from its one-level treedef (kept as the entry's aux). Never instantiated: the
    GraphDef names this class for such entries."""


def pytree_flatten(node: object) -> tuple[list[tuple[Key, object]], Any]:
    """A JAX pytree's children one level down, with plain keys, and its one-level treedef
    (a JAX leaf has no children: its treedef is one leaf)."""
    keyed, treedef = jax.tree_util.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)
    return [(key_to_plain(keypath[0]), child) for keypath, child in keyed if keypath], treedef


def is_leaf_treedef(treedef: Any) -> bool:
    """Whether a one-level treedef (`pytree_flatten`'s) is a JAX leaf's, not a pytree node's."""
    return treedef.num_nodes == 1 and treedef.num_leaves == 1


def _pytree_unflatten(cls: type, aux: Hashable, children: list[tuple[Key, object]]) -> object:
    return aux.unflatten([child for _, child in children])  # type: ignore[attr-defined]  # aux is the treedef


def _pytree_set_key(node: object, key: Key, child: object) -> None:
    raise TypeError(
        f"cannot set {key!r} of a {type(node).__name__} in place: it is a JAX pytree that "
        "bryo walks but cannot change. Assign a new one to the attribute holding it."
    )


JAX_PYTREE = NodeType(
    JaxPytree,
    flatten=pytree_flatten,
    unflatten=_pytree_unflatten,
    set_key=_pytree_set_key,  # (not cacheable: its changes go unseen)
)


def is_pytree_node(value: object) -> bool:
    """Whether JAX flattens `value` into children (None, an empty pytree, is not counted)."""
    return value is not None and not jax.tree_util.treedef_is_leaf(
        jax.tree_util.tree_structure(value, is_leaf=lambda x: x is not value)
    )


def dict_flatten(node: dict) -> tuple[Children, Hashable]:
    """A dict's items, sorted by key when the keys compare (as jax sorts them)."""
    try:
        return sorted(node.items()), None
    except TypeError:  # keys of mixed types keep insertion order
        return list(node.items()), None


def _setitem(node: object, key: Key, child: object) -> None:
    node[key] = child  # type: ignore[index]  # a list or dict node


def _delitem(node: object, key: Key) -> None:
    del node[key]  # type: ignore[attr-defined]  # a list or dict node


def _rebuild_dict(cls: type, children: list[tuple[Key, object]]) -> dict:
    return dict(children) if cls is dict else cls(children)


def _rebuild_list(cls: type, children: list[tuple[Key, object]]) -> list:
    values = [child for _, child in children]
    return values if cls is list else cls(values)


def _tuple_flatten(node: tuple) -> tuple[Children, None]:
    """A tuple's items by position, a namedtuple's by field name (its keys in JAX's key
    paths, and Flax NNX's graph paths: `opt_state[0]` of Adam holds `count`, `mu`, `nu`)."""
    fields = getattr(type(node), "_fields", None)
    if fields is not None and len(fields) == len(node):
        return zip(fields, node, strict=True), None
    return enumerate(node), None


def _rebuild_tuple(cls: type, children: list[tuple[Key, object]]) -> tuple:
    values = [child for _, child in children]
    if cls is tuple:
        return tuple(values)
    if hasattr(cls, "_fields"):  # namedtuple
        return cls(*values)
    return cls(values)
