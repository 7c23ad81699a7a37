"""Tree mode (`graph=False`): the graph functions over modules as plain JAX pytrees.

Modules, `Rngs`, `List`s and `Dict`s are pytrees (`_object`), so `split(model,
graph=False)` is `jax.tree_util` with Variables as leaves: its `TreeDef` wraps the pytree
structure, its States map the key paths to the live Variables and raw leaves. Tree mode
is cheaper to think about but knows no sharing: a Variable or a `jax.new_ref` array met
twice, a cycle (found by `_cycles` before JAX's recursive flatten meets it), or an
Object of a `pytree=False` class is an error naming the paths, as in Flax NNX 0.12.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import jax

from bryo_filters import Filter
from bryo_pytree import Path, keypath_to_path, path_str

from ._calls import MethodCaller, Step, method_of
from ._compat import is_ref
from ._cycles import CycleFound, check_acyclic
from ._entries import VariableEntry
from ._errors import GraphError
from ._nodes import is_leaf_treedef, node_type_of, pytree_flatten
from ._state import State, group_flat, sorted_paths
from ._variables import Variable, VariableMeta, variable_class


def _advice(fn_name: str, *, transform: bool) -> str:
    """Flax NNX 0.12's advice after a tree-mode error: the ways out, naming `fn_name`."""
    keywords = "graph=True, graph_updates=True" if transform else "graph=True"
    return (
        "Consider the following options:\n\n"
        "1. Remove the duplicates and guarantee a tree structure.\n"
        f"2. Use graph mode: pass {keywords} to {fn_name} e.g.\n\n"
        f"  nnx.{fn_name}(..., {keywords})"
    )


def _found_twice(what: str, first: Path, second: Path, problem: str, advice: str) -> ValueError:
    """Flax NNX 0.12's tree-mode error text: `what` found at two paths."""
    return ValueError(
        f"{what}\nfound at paths:\n\n  - {path_str(first)}\n  - {path_str(second)}\n\n"
        f"{problem} {advice}"
    )


_SHARED = "Tree mode (graph=False) does not support shared references."
_CYCLES = "Cycles are not supported with graph=False."


class TreeDef:
    """The GraphDef of tree mode: a pytree structure, plus per leaf the Variable class
    and metadata to rebuild a Variable from a raw value. Hashable, and static for JAX.

    Attributes:
        treedef: the `jax.tree_util` structure, Variables as leaves.
        paths: the State paths of the leaves, in order.
        metas: per leaf, the `VariableMeta` of a Variable, or None for a raw leaf.
        root_type: the type of the node flattened.
    """

    __slots__ = ("_hash", "metas", "paths", "root_type", "treedef")

    def __init__(
        self, treedef: Any, paths: tuple[Path, ...], metas: tuple, root_type: type = object
    ) -> None:
        self.treedef = treedef
        self.paths = paths
        self.metas = metas
        self.root_type = root_type
        self._hash = hash((treedef, paths, metas))

    @property
    def nodes(self) -> tuple[TreeNodeDef | VariableEntry, ...]:
        """Flax NNX's view of a tree-mode GraphDef (its `graphdef.nodes`): a `TreeNodeDef`
        first, then a `VariableEntry` per Variable leaf, numbered in sorted path order (a
        graph-mode GraphDef's `nodes` start with a `NodeEntry` or `VariableEntry`)."""
        order = sorted_paths(self.paths)
        position = {path: i for i, path in enumerate(self.paths)}
        path_index = tuple((path, position[path]) for path in order)
        metas = [self.metas[position[path]] for path in order]
        variables = [VariableEntry(m.type, i) for i, m in enumerate(metas) if m is not None]
        return (TreeNodeDef(self.root_type, self.treedef, path_index), *variables)

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

    def apply(self, state: Any, /, *states: Any) -> MethodCaller:
        """`GraphDef.apply` for tree mode: `(output, (treedef, state))` of a method call
        on the pytree merged from copies of `state`'s Variables (`state` is unchanged)."""

        def run(steps: tuple[Step, ...], args: tuple, kwargs: dict[str, Any]) -> tuple:
            node = tree_merge(self, (state, *states), copy=True)
            out = method_of(node, steps)(*args, **kwargs)
            return out, tree_split(node, ())

        return MethodCaller(run)


jax.tree_util.register_static(TreeDef)


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True, slots=True)
class TreeNodeDef:
    """The first of a tree-mode GraphDef's `nodes` (Flax NNX's `nnx.graphlib.TreeNodeDef`).

    Attributes:
        type: the type of the node flattened.
        treedef: its `jax.tree_util` structure, Variables as leaves.
        path_index: per State leaf in sorted path order (the order of `flatten`'s leaves),
            its path and its position among `treedef`'s leaves.
    """

    type: type
    treedef: Any
    path_index: tuple[tuple[Path, int], ...]


def _is_variable(value: object) -> bool:
    return isinstance(value, Variable)


def tree_flatten(
    node: object, fn_name: str, *, transform: bool = False
) -> tuple[TreeDef, dict[Path, object]]:
    """`node`'s TreeDef and `{path: leaf}` (Variables and raw leaves), checked; the
    errors name `fn_name` (a transform's when `transform`)."""
    try:
        check_acyclic(node)  # JAX's recursive flatten would not survive a cycle
    except CycleFound as cycle:
        raise _cycle_error(cycle, fn_name, transform) from None
    keyed, treedef = jax.tree_util.tree_flatten_with_path(node, is_leaf=_is_variable)
    flat: dict[Path, object] = {}
    seen: dict[int, Path] = {}
    metas = []
    for keypath, leaf in keyed:
        path = keypath_to_path(keypath)
        _check_leaf(leaf, path, seen, fn_name, transform)
        flat[path] = leaf
        is_var = isinstance(leaf, Variable)
        metas.append(VariableMeta(variable_class(leaf), leaf._metadata) if is_var else None)
    return TreeDef(treedef, tuple(flat), tuple(metas), type(node)), flat


def _cycle_error(cycle: CycleFound, fn_name: str, transform: bool) -> ValueError:
    what = f"Cycle detected for {type(cycle.node).__name__}"
    advice = _advice(fn_name, transform=transform)
    return _found_twice(what, cycle.first, cycle.second, _CYCLES, advice)


def _check_leaf(
    leaf: object, path: Path, seen: dict[int, Path], fn_name: str, transform: bool
) -> None:
    if isinstance(leaf, Variable) or is_ref(leaf):  # a mutable leaf: no sharing
        first = seen.setdefault(id(leaf), path)
        if first is not path:
            advice = _advice(fn_name, transform=transform)
            raise _found_twice(f"Duplicate {leaf!r}", first, path, _SHARED, advice)
        return
    check_pytree(leaf, path, fn_name, transform=transform)


def check_pytree(node: object, path: Path, fn_name: str, *, transform: bool = False) -> None:
    """Raise Flax's error if `node` is a mutable graph node JAX sees as a leaf (an Object
    of a `pytree=False` class), which tree mode cannot walk; `path` is where it was met."""
    node_type = node_type_of(node)
    if node_type is not None and node_type.mutable and is_jax_leaf(node):
        raise ValueError(
            f"Cannot use '{fn_name}' with graph=False on a '{type(node).__name__}' instance "
            f"that has pytree=False. Found at path: {path_str(path)}. Pytree subclasses with "
            "pytree=False are not registered as JAX pytrees and cannot be used in tree mode. "
            + _advice(fn_name, transform=transform)
        )


def is_jax_leaf(value: object) -> bool:
    """Whether JAX flattens `value` to itself (it is not a registered pytree node)."""
    return is_leaf_treedef(pytree_flatten(value)[1])  # one level down only


def check_tree(node: object, /, *, name: str) -> None:
    """Raise the tree-mode error if `node` shares a Variable, has a cycle, or holds an
    Object of a `pytree=False` class; `name` is the transform reported (`'jit'`, ...)."""
    tree_flatten(node, name, transform=True)


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
    groups = group_flat(flat, filters, require_all=True)
    if () in flat:  # a bare Variable or array: itself
        groups = tuple(_state_of(group._flat) for group in groups)
    return (treedef, *groups)


def tree_state(node: object, filters: tuple[Filter, ...]) -> Any:
    """`state(node, *filters, graph=False)`."""
    _, flat = tree_flatten(node, "state")
    if not filters:
        return _state_of(flat)
    states = group_flat(flat, filters, require_all=False)
    return states[0] if len(filters) == 1 else states


def tree_merge(
    treedef: TreeDef, states: tuple, *, copy: bool, recreate_variables: bool = True
) -> Any:
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
        _leaf(flat[path], meta if recreate_variables else None, copy)
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
    if isinstance(value, Variable) or is_leaf_treedef(treedef):
        _check_leaf(value, path, seen, "iter_graph", False)
        yield path, value
        return
    if id(value) in in_progress:
        first = in_progress[id(value)]
        advice = _advice("iter_graph", transform=False)
        raise _found_twice(
            f"Cycle detected for {type(value).__name__}", first, path, _CYCLES, advice
        )
    in_progress[id(value)] = path
    for keypath, child in children:
        yield from _iter_tree(child, (*path, *keypath_to_path(keypath)), in_progress, seen)
    del in_progress[id(value)]
    yield path, value
