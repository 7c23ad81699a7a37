"""`to_tree` / `from_tree`: a pytree holding graphs, as a pure pytree of `NodeStates`, and back.

`to_tree` splits every graph object (module, `List`/`Dict`, Variable) of a pytree in one
`split_context`, so objects shared between leaves stay shared (a later occurrence is a
reference with an empty State) and, with `ctxtag`, the splits take part in that update
context (see `_update_context`). A `prefix` tree gives each graph leaf a prefix (as
`jax.vmap`'s `in_axes` do), which a custom `split_fn` may use to split with filters; a
Variable reached under two different prefixes is refused. `from_tree` merges them back in
one `merge_context`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any as _Any

import jax

from ._errors import GraphError
from ._graph import _COPIED, GraphDef, iter_graph
from ._nodes import node_type_of
from ._tree_mode import TreeDef
from ._update_context import MergeContext, SplitContext, merge_context, split_context
from ._variables import Variable


class NodeStates:
    """One graph object of a `to_tree` output: its GraphDef and its States (`states`), plus
    static `metadata`. A pytree whose leaves are the States' leaves. Built with
    `from_split(graphdef, *states)`, or without a GraphDef (`from_states`,
    `from_prefixes`: a prefix for `jax.vmap`'s `in_axes`, one per State)."""

    __slots__ = ("_graphdef", "metadata", "states")

    def __init__(
        self, _graphdef: GraphDef | TreeDef | None, states: tuple, metadata: _Any = None
    ) -> None:
        self._graphdef = _graphdef
        self.states = tuple(states)
        self.metadata = metadata

    @property
    def graphdef(self) -> GraphDef | TreeDef:
        if self._graphdef is None:
            raise ValueError(
                "this NodeStates has no GraphDef (it was made by `from_states` or "
                "`from_prefixes`); make it with `NodeStates.from_split(graphdef, *states)`."
            )
        return self._graphdef

    @property
    def state(self) -> _Any:
        """The only State; a `ValueError` when there are several."""
        if len(self.states) != 1:
            raise ValueError(
                f"`NodeStates.state` needs exactly one State, this one has {len(self.states)}: "
                "read `.states` instead."
            )
        return self.states[0]

    @classmethod
    def from_split(
        cls, graphdef: GraphDef | TreeDef | None, state: _Any, /, *states: _Any, metadata=None
    ) -> NodeStates:
        return cls(graphdef, (state, *states), metadata)

    @classmethod
    def from_states(cls, state: _Any, /, *states: _Any) -> NodeStates:
        return cls(None, (state, *states))

    @classmethod
    def from_prefixes(cls, prefixes: Sequence[_Any], /, *, metadata: _Any = None) -> NodeStates:
        return cls(None, tuple(prefixes), metadata)

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is NodeStates
            and self._graphdef == other._graphdef
            and self.metadata == other.metadata
            and all(a is b or a == b for a, b in zip(self.states, other.states, strict=False))
            and len(self.states) == len(other.states)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable contents, as a dataclass

    def __repr__(self) -> str:
        return f"NodeStates(graphdef={self._graphdef!r}, states={self.states!r})"


def _node_states_children(node: NodeStates) -> tuple[tuple, _Any]:
    keys = (jax.tree_util.GetAttrKey("_graphdef"), jax.tree_util.GetAttrKey("states"))
    return tuple(zip(keys, (node._graphdef, node.states), strict=True)), node.metadata


def _node_states_rebuild(metadata: _Any, children: _Any) -> NodeStates:
    graphdef, states = children
    return NodeStates(graphdef, states, metadata)


jax.tree_util.register_pytree_with_keys(NodeStates, _node_states_children, _node_states_rebuild)


def is_graph_object(value: object) -> bool:
    """A Variable or a graph node that keeps its identity (not a plain dict/list/tuple)."""
    if isinstance(value, Variable):
        return True
    node_type = node_type_of(value)
    return node_type is not None and node_type.type not in _COPIED


def is_tree_node(value: object) -> bool:
    """Whether `value` is a `NodeStates` (what `from_tree` merges by default)."""
    return isinstance(value, NodeStates)


SplitFn = Callable[[SplitContext, tuple, _Any, _Any], _Any]
MergeFn = Callable[[MergeContext, tuple, _Any, _Any], _Any]


def default_split_fn(ctx: SplitContext, path: tuple, prefix: _Any, leaf: _Any) -> NodeStates:
    """`NodeStates.from_split(*ctx.split(leaf))`: the whole State, no filters."""
    return NodeStates.from_split(*ctx.split(leaf))


def merge_tree_node(ctx: MergeContext, path: tuple, prefix: _Any, leaf: NodeStates) -> _Any:
    """`ctx.merge(leaf.graphdef, *leaf.states)`: the graph object back."""
    if not isinstance(leaf, NodeStates):
        raise GraphError(
            f"`from_tree` found a {type(leaf).__name__} at {jax.tree_util.keystr(path)}, where "
            "`to_tree` leaves a NodeStates; pass the tree `to_tree` returned (or a `merge_fn` "
            "that merges such leaves)."
        )
    return ctx.merge(leaf.graphdef, *leaf.states)


class _Missing:
    def __repr__(self) -> str:
        return "Missing"


Missing: _Any = _Missing()


def broadcast_prefix(prefix: _Any, tree: _Any, is_leaf: Callable[[_Any], bool]) -> list:
    """One prefix per leaf of `tree` (its leaves as `is_leaf` says): each leaf of `prefix`
    (None included) repeated over the subtree of `tree` it covers."""
    out: list = []

    def add(leaf_prefix: _Any, subtree: _Any) -> None:
        out.extend([leaf_prefix] * len(jax.tree_util.tree_leaves(subtree, is_leaf=is_leaf)))

    try:
        jax.tree_util.tree_map(
            add, prefix, tree, is_leaf=lambda x: x is None or is_graph_object(x) or is_leaf(x)
        )
    except ValueError as error:
        raise ValueError(
            f"`prefix` must be a tree prefix of the tree (the same structure down to its "
            f"leaves, each leaf standing for a whole subtree); it is not: {error}"
        ) from error
    return out


def check_consistent_aliasing(
    node: object, prefix: _Any, /, *, node_prefixes: dict[int, list] | None = None
) -> None:
    """Refuse a Variable that `node` shares with a graph met before under another prefix
    (`node_prefixes` collects `id(variable) -> [(path, prefix), ...]` across calls)."""
    seen: dict[int, list] = {} if node_prefixes is None else node_prefixes
    variables: dict[int, Variable] = {}
    for path, value in iter_graph(node, graph=True):
        if isinstance(value, Variable):
            variables[id(value)] = value
            seen.setdefault(id(value), []).append((path, prefix))
    conflicts = []
    for key, variable in variables.items():
        pairs = seen[key]
        if any(p is not pairs[0][1] and p != pairs[0][1] for _, p in pairs[1:]):
            where = "\n".join(
                f"  {'/'.join(map(str, path)) or '<root>'}: {p!r}" for path, p in pairs
            )
            conflicts.append(f"{type(variable).__name__}:\n{where}")
    if conflicts:
        raise ValueError(
            "Inconsistent aliasing detected: a Variable is reached under different prefixes, "
            "so it would be split two ways. Give every path to a shared Variable the same "
            "prefix.\n" + "\n".join(conflicts)
        )


def to_tree(
    tree: _Any,
    /,
    *,
    prefix: _Any = Missing,
    split_fn: SplitFn = default_split_fn,
    map_non_graph_nodes: bool = False,
    ctxtag: Hashable | None = None,
    check_aliasing: bool = True,
) -> _Any:
    """`tree` with each graph object (module, `List`/`Dict`, Variable) replaced by
    `split_fn(ctx, keypath, prefix, leaf)` (by default its `NodeStates`), all split in one
    `split_context(ctxtag)`; other leaves stay (or go through `split_fn` too with
    `map_non_graph_nodes=True`). `prefix` (a tree prefix of `tree`) gives each leaf the
    prefix `split_fn` receives; a Variable reached under two different prefixes raises a
    `ValueError` (`check_aliasing=False` skips the check)."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_graph_object)
    if prefix is Missing or prefix is None:
        prefixes: list = [prefix] * len(leaves)
        check_aliasing = False
    else:
        prefixes = broadcast_prefix(prefix, tree, is_graph_object)
    node_prefixes: dict[int, list] = {}
    out = []
    with split_context(ctxtag) as ctx:
        for (keypath, leaf), leaf_prefix in zip(leaves, prefixes, strict=True):
            if is_graph_object(leaf):
                if check_aliasing:
                    check_consistent_aliasing(leaf, leaf_prefix, node_prefixes=node_prefixes)
                leaf = split_fn(ctx, keypath, leaf_prefix, leaf)
            elif map_non_graph_nodes:
                leaf = split_fn(ctx, keypath, leaf_prefix, leaf)
            out.append(leaf)
    return jax.tree_util.tree_unflatten(treedef, out)


def from_tree(
    tree: _Any,
    /,
    *,
    prefix: _Any = Missing,
    merge_fn: MergeFn = merge_tree_node,
    is_node_leaf: Callable[[_Any], bool] = is_tree_node,
    is_leaf: Callable[[_Any], bool] = is_tree_node,
    map_non_graph_nodes: bool = False,
    is_inner: bool | None = None,
    ctxtag: Hashable | None = None,
) -> _Any:
    """The inverse of `to_tree`: each `NodeStates` (each leaf `is_node_leaf` accepts)
    merged back by `merge_fn(ctx, keypath, prefix, leaf)` in one
    `merge_context(ctxtag, is_inner)`, so references between them hold."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_leaf)
    if prefix is Missing or prefix is None:
        prefixes: list = [prefix] * len(leaves)
    else:
        prefixes = broadcast_prefix(prefix, tree, is_leaf)
    out = []
    with merge_context(ctxtag, is_inner) as ctx:
        for (keypath, leaf), leaf_prefix in zip(leaves, prefixes, strict=True):
            if map_non_graph_nodes or is_node_leaf(leaf) or isinstance(leaf, Variable):
                leaf = merge_fn(ctx, keypath, leaf_prefix, leaf)
            out.append(leaf)
    return jax.tree_util.tree_unflatten(treedef, out)


def clear_non_graph_nodes(tree: _Any) -> _Any:
    """`tree` with every leaf that is not a graph object (module, Variable) made None."""
    return jax.tree_util.tree_map(
        lambda x: x if is_graph_object(x) else None, tree, is_leaf=is_graph_object
    )
