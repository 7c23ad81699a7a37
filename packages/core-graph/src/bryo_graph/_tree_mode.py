"""Tree mode (`graph=False`): the graph functions over modules as plain JAX pytrees.

Modules, `Rngs`, `List`s and `Dict`s are pytrees (`_object`), so `split(model,
graph=False)` is `jax.tree_util` with Variables as leaves: its `TreeDef` wraps the pytree
structure, its States map the key paths to the live Variables and raw leaves. Tree mode
is cheaper to think about but knows no sharing: a Variable met twice, a cycle, or an
Object of a `pytree=False` class is an error naming the paths, as in Flax NNX 0.12.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import jax

from bryo_filters import Filter
from bryo_pytree import Path, keypath_to_path, path_str

from ._errors import GraphError
from ._nodes import node_type_of
from ._state import State, group_flat
from ._variables import Variable, VariableMeta

_ADVICE = (
    "Tree mode (graph=False) knows no shared references or cycles. Remove them, or use "
    "graph mode: pass `graph=True` (the default unless `set_graph_mode(False)` is on)."
)


class TreeDef:
    """The GraphDef of tree mode: a pytree structure, plus per leaf the Variable class
    and metadata to rebuild a Variable from a raw value. Hashable, and static for JAX.

    Attributes:
        treedef: the `jax.tree_util` structure, Variables as leaves.
        paths: the State paths of the leaves, in order.
        metas: per leaf, the `VariableMeta` of a Variable, or None for a raw leaf.
    """

    __slots__ = ("_hash", "metas", "paths", "treedef")

    def __init__(self, treedef: Any, paths: tuple[Path, ...], metas: tuple) -> None:
        self.treedef = treedef
        self.paths = paths
        self.metas = metas
        self._hash = hash((treedef, paths, metas))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, TreeDef)
            and self._hash == other._hash
            and self.paths == other.paths
            and self.metas == other.metas
            and self.treedef == other.treedef
        )

    def __repr__(self) -> str:
        return f"TreeDef({self.treedef})"


jax.tree_util.register_static(TreeDef)


def _is_variable(value: object) -> bool:
    return isinstance(value, Variable)


def tree_flatten(node: object, fn_name: str) -> tuple[TreeDef, dict[Path, object]]:
    """`node`'s TreeDef and `{path: leaf}` (Variables and raw leaves), checked."""
    try:
        keyed, treedef = jax.tree_util.tree_flatten_with_path(node, is_leaf=_is_variable)
    except RecursionError:
        raise ValueError(
            f"`{fn_name}` with graph=False met a cycle in {type(node).__name__}. {_ADVICE}"
        ) from None
    flat: dict[Path, object] = {}
    seen: dict[int, Path] = {}
    metas = []
    for keypath, leaf in keyed:
        path = keypath_to_path(keypath)
        _check_leaf(leaf, path, seen, fn_name)
        flat[path] = leaf
        is_var = isinstance(leaf, Variable)
        metas.append(VariableMeta(type(leaf), leaf._metadata) if is_var else None)
    return TreeDef(treedef, tuple(flat), tuple(metas)), flat


def _check_leaf(leaf: object, path: Path, seen: dict[int, Path], fn_name: str) -> None:
    if isinstance(leaf, Variable):
        first = seen.setdefault(id(leaf), path)
        if first is not path:
            raise ValueError(
                f"`{fn_name}` with graph=False found the same {type(leaf).__name__} at "
                f"{path_str(first)} and at {path_str(path)}. {_ADVICE}"
            )
        return
    node_type = node_type_of(leaf)
    if node_type is not None and node_type.mutable:
        raise ValueError(
            f"Cannot use `{fn_name}` with graph=False on a '{type(leaf).__name__}' instance "
            f"that has pytree=False (it is not a JAX pytree). Found at path: {path_str(path)}. "
            "Use graph mode (`graph=True`), or make the class a pytree."
        )


def check_tree(node: object, /, *, name: str) -> None:
    """Raise the tree-mode error if `node` shares a Variable, has a cycle, or holds an
    Object of a `pytree=False` class; `name` is the function reported (`'jit'`, ...)."""
    tree_flatten(node, name)


def _state_of(flat: dict[Path, object]) -> Any:
    """A bare Variable or array (path `()`) is its own state, as in Flax."""
    if len(flat) == 1 and () in flat:
        return flat[()]
    return State._from_flat(flat)


def tree_split(node: object, filters: tuple[Filter, ...]) -> tuple[Any, ...]:
    """`split(node, *filters, graph=False)`."""
    treedef, flat = tree_flatten(node, "split")
    if not filters:
        return treedef, _state_of(flat)
    return (treedef, *group_flat(flat, filters, require_all=True))


def tree_state(node: object, filters: tuple[Filter, ...]) -> Any:
    """`state(node, *filters, graph=False)`."""
    _, flat = tree_flatten(node, "state")
    if not filters:
        return _state_of(flat)
    states = group_flat(flat, filters, require_all=False)
    return states[0] if len(filters) == 1 else states


def tree_merge(treedef: TreeDef, states: tuple, *, copy: bool) -> Any:
    """`merge(treedef, *states)`: the pytree rebuilt, raw values wrapped back into the
    Variables they came from (Variables given are used as they are, unless `copy`)."""
    flat = _flat_of(states)
    missing = [p for p in treedef.paths if p not in flat]
    extra = [p for p in flat if p not in set(treedef.paths)]
    if missing or extra:
        raise GraphError(
            "the state does not fit the tree-mode GraphDef: "
            + "; ".join(
                f"{what} {', '.join(map(path_str, paths[:6]))}"
                for what, paths in (("missing", missing), ("not in the tree", extra))
                if paths
            )
            + ". Merge the States `split(..., graph=False)` returned."
        )
    leaves = [
        _leaf(flat[path], meta, copy)
        for path, meta in zip(treedef.paths, treedef.metas, strict=True)
    ]
    return treedef.treedef.unflatten(leaves)


def _flat_of(states: tuple) -> dict[Path, object]:
    if len(states) == 1 and not isinstance(states[0], Mapping):
        return {(): states[0]}  # a bare Variable or array
    return State.merge(*states)._flat


def _leaf(leaf: object, meta: VariableMeta | None, copy: bool) -> object:
    if isinstance(leaf, Variable):
        return leaf.copy() if copy else leaf
    if meta is not None:
        return meta.type.from_metadata(leaf, meta.metadata)
    return leaf


def tree_iter(node: object) -> Iterator[tuple[Path, Any]]:
    """`iter_graph(node, graph=False)`: pytree nodes and leaves, children first."""
    yield from _iter_tree(node, (), {}, {})


def _iter_tree(
    value: object, path: Path, in_progress: dict[int, Path], seen: dict[int, Path]
) -> Iterator[tuple[Path, Any]]:
    children, treedef = jax.tree_util.tree_flatten_with_path(
        value, is_leaf=lambda x: x is not value
    )
    if isinstance(value, Variable) or jax.tree_util.treedef_is_leaf(treedef):
        _check_leaf(value, path, seen, "iter_graph")
        yield path, value
        return
    if id(value) in in_progress:
        raise ValueError(
            f"`iter_graph` with graph=False met a cycle: {type(value).__name__} at "
            f"{path_str(in_progress[id(value)])} is reached again at {path_str(path)}. {_ADVICE}"
        )
    in_progress[id(value)] = path
    for keypath, child in children:
        yield from _iter_tree(child, (*path, *keypath_to_path(keypath)), in_progress, seen)
    del in_progress[id(value)]
    yield path, value
