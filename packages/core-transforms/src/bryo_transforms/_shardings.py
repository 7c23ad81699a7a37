"""Shardings and donation of `jit` arguments that hold graph nodes.

`jax.jit` takes `in_shardings` and `donate_argnums` per argument; a graph-mode `jit` hands
JAX flat lists of the models' State leaves instead. `LeafOptions.of` turns the caller's
per-argument options into per-leaf ones: an argument that is a graph node takes one
sharding for all its leaves, a `StateSharding({filter: sharding, ...})` choosing by
`(path, Variable)`, or None (unspecified); array arguments take a sharding or None;
containers take a prefix of themselves. `prefix` builds, for simple mode, a pytree
prefix of a model with a value per Variable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import jax

from bryo_filters import Filter, to_predicate
from bryo_graph import State, Variable
from bryo_graph.extract import Opaque, TreeState, prefix_of, to_tree
from bryo_pytree import Path, broadcast_prefix, keypath_to_path

from ._axes import check_consistent_aliasing, path_filters
from ._layout import ARRAY, ROOT, StaticLayout, TreeLayout, is_graph_leaf
from ._plan import CallPlan
from ._prefix_filters import remember
from ._simple import SHARED_TYPES, mark_aliases


class StateSharding:
    """Shardings of a graph node's State leaves, chosen by filter (first match wins).

    Example:
        >>> StateSharding({PathContains("kernel"): row_sharding, ...: replicated})  # doctest: +SKIP

    A State of shardings (`State({'kernel': P(None, 'a'), 'bias': P()})`) gives each
    path its own sharding.
    """

    def __init__(
        self,
        filter_sharding: State | Mapping[Filter, Any] | Iterable[tuple[Filter, Any]],
        /,
    ) -> None:
        if isinstance(filter_sharding, State):  # a State of specs: its paths become PathIns
            items = tuple(path_filters(filter_sharding, "StateSharding"))
        else:
            items = tuple(
                filter_sharding.items() if isinstance(filter_sharding, Mapping) else filter_sharding
            )
        self.filters: tuple[Filter, ...] = tuple(f for f, _ in items)
        self.shardings: tuple[Any, ...] = tuple(s for _, s in items)
        self._predicates = [to_predicate(f) for f in self.filters]

    def for_leaf(self, path: Path, value: object) -> Any:
        """The sharding of the leaf at `path` (None when no filter matches)."""
        for predicate, sharding in zip(self._predicates, self.shardings, strict=True):
            if predicate(path, value):
                return sharding
        return None

    def __repr__(self) -> str:
        pairs = ", ".join(
            f"{f!r}: {s!r}" for f, s in zip(self.filters, self.shardings, strict=True)
        )
        return f"StateSharding({{{pairs}}})"


def _is_spec_leaf(value: object) -> bool:
    return value is None or isinstance(value, StateSharding) or is_graph_leaf(value)


def check_prefix(spec: object, name: str, *, graph: bool) -> None:
    """Refuse graph nodes in a graph-mode sharding prefix (simple mode takes the
    module-shaped prefixes of `prefix`), and `StateSharding`s in simple mode."""
    is_leaf = _is_spec_leaf if graph else lambda x: x is None or isinstance(x, StateSharding)
    for leaf in jax.tree.leaves(spec, is_leaf=is_leaf):
        if graph and is_graph_leaf(leaf):
            raise ValueError(
                f"Graph nodes are not allowed as prefixes: `{name}` holds a "
                f"{type(leaf).__name__}. Give a sharding, or a `StateSharding({{filter: "
                "sharding})` for a graph node's State (simple mode: "
                "`prefix(model, {filter: sharding})`)."
            )
        if isinstance(leaf, StateSharding) and not graph:
            raise ValueError(
                f"`{name}` of `jit` in simple mode (graph=False or graph_updates=False) cannot "
                "contain `StateSharding` objects: JAX sees the models as pytrees. Use "
                "`prefix(model, {filter: sharding})` for a pytree prefix instead."
            )


class LeafOptions(NamedTuple):
    """Per flat input of a graph-mode `jit`: shardings and donation.

    Attributes:
        var_shardings: per Variable leaf (State order), a sharding or None.
        raw_shardings: per raw array leaf of the graphs, a sharding or None.
        array_shardings: per array argument leaf, a sharding or None.
        donated_leaves: the State leaves (by index) whose buffers are donated.
        donated_arrays: the array argument leaves (by index) that are donated.
    """

    var_shardings: list
    raw_shardings: list
    array_shardings: list
    donated_leaves: frozenset[int]
    donated_arrays: frozenset[int]

    @classmethod
    def of(
        cls,
        plan: CallPlan,
        args: Sequence[object],
        kwargs: Mapping[str, object],
        in_shardings: object,
        donated: Callable[[int | str], bool],
        static: frozenset[int | str],
        name: str = "in_shardings",
    ) -> LeafOptions:
        """The per-leaf options of a call on `args`/`kwargs` (its `plan`); `static`
        holds the static positions, which `in_shardings` skips as in `jax.jit`. A
        Variable shared by several arguments must get one sharding (`name`: the
        option's name, for the error)."""
        sig = plan.sig
        root_specs: list = []
        array_specs: list = []
        root_donated: list[bool] = []
        array_donated: list[bool] = []
        dynamic = [i for i in range(len(args)) if i not in static]
        per_dynamic = dict(zip(dynamic, _per_argument(in_shardings, len(dynamic)), strict=True))
        named = [(i, a, per_dynamic.get(i)) for i, a in enumerate(args)]
        named += [(k, kwargs[k], None) for k, _ in sig.kw_layouts]
        for (argument, value, spec), (_, layout) in zip(named, sig.named_layouts(), strict=True):
            if isinstance(layout, StaticLayout):
                continue
            kinds = layout.leaf_kinds
            if isinstance(layout, TreeLayout):
                full = broadcast_prefix(spec, value, is_leaf=is_graph_leaf, name="in_shardings")
                specs = _leaf_specs(value, full, layout)
            else:
                specs = [spec]
            for kind, leaf_spec in zip(kinds, specs, strict=True):
                if kind is ARRAY:
                    array_specs.append(leaf_spec)
                    array_donated.append(donated(argument))
                elif kind is ROOT:
                    root_specs.append(leaf_spec)
                    root_donated.append(donated(argument))
        if in_shardings is not None:
            check_consistent_aliasing(plan, root_specs, name, _sharding_of)
        var_sh, raw_sh, donated_leaves = [], [], set()
        for k, (path, meta, source) in enumerate(
            zip(sig.paths, sig.metas, plan.sources, strict=True)
        ):
            root = path[1]
            spec = root_specs[root]  # type: ignore[index]  # path[1] of a pair path is the root's index (an int)
            if isinstance(spec, StateSharding):
                leaf = source.variable if source.variable is not None else source.value
                spec = spec.for_leaf(path[2:], leaf)
            (raw_sh if meta is None else var_sh).append(spec)
            if root_donated[root]:  # type: ignore[index]  # path[1] of a pair path is the root's index (an int)
                donated_leaves.add(k)
        donated_arrays = frozenset(i for i, d in enumerate(array_donated) if d)
        return cls(var_sh, raw_sh, array_specs, frozenset(donated_leaves), donated_arrays)


def _sharding_of(spec: object, path: Path, variable: Variable) -> object:
    return spec.for_leaf(path, variable) if isinstance(spec, StateSharding) else spec


def _per_argument(spec: object, n_args: int) -> tuple:
    if isinstance(spec, tuple | list):
        if len(spec) != n_args:
            raise ValueError(
                f"`in_shardings` has {len(spec)} entries for {n_args} positional arguments "
                "(static ones excepted); give one per argument (None: unspecified), or one "
                "for all."
            )
        return tuple(spec)
    return (spec,) * n_args


def _leaf_specs(value: object, full: object, layout: TreeLayout) -> list:
    """The spec of each non-static leaf of a container argument, from its expanded prefix."""
    specs = jax.tree_util.tree_structure(value, is_leaf=is_graph_leaf).flatten_up_to(full)
    return [s for s, kind in zip(specs, layout.kinds, strict=True) if kind in (ARRAY, ROOT)]


def prefix(
    node: object,
    filter_map: Mapping[Filter, Any] | Callable[[Path, Any], Any],
    /,
    *,
    graph: bool | None = None,
) -> Any:
    """A prefix of `node` with a value per Variable (and raw array leaf):
    `filter_map(path, leaf)`, or the value of the first filter of a mapping that matches.
    Use it as the `in_axes`/`out_axes`/`in_shardings`/`out_shardings` of a transform in
    simple mode (`graph_updates=False`).

    With `graph=True` each graph node (module, `List`, `Dict`, Variable) of `node` becomes
    a `TreeState` (`bryo_graph.extract`) whose `state` holds the values, as Flax NNX's
    `nnx.prefix(..., graph=True)`: the nodes are taken jointly, so a node met again (a
    model passed twice) gets an empty `state`. Pass every graph node the transform takes,
    in the order it takes them: `nnx.prefix((model, model), {nnx.Param: 0}, graph=True)`
    gives the two `in_axes` of `f(model, model)`, whose places of a shared Variable must
    get one value. Otherwise (`graph=False`, and bryo's default) the prefix follows the
    pytree structure (a module-shaped prefix, also for `jax.vmap`).

    Args:
        node: a model, or a container of them.
        filter_map: `(path, leaf) -> value`, or `{filter: value}` (first match wins; a
            leaf no filter matches is an error: end with `...: None` for the rest).
        graph: True for `TreeState`s per graph node; False or None for a pytree prefix.

    Returns:
        `node`'s structure with the values in place of its Variables (`TreeState`s in
        place of its graph nodes with `graph=True`).

    Raises:
        ValueError: a leaf no filter of a mapping matches, naming its path and the filters.

    Example:
        >>> shardings = prefix(model, {PathContains("kernel"): row, ...: None})  # doctest: +SKIP
        >>> first, second = prefix((model, model), {Param: 0}, graph=True)  # doctest: +SKIP
    """
    choose = _first_match(filter_map) if isinstance(filter_map, Mapping) else filter_map
    mapping = filter_map if isinstance(filter_map, Mapping) else None
    if graph:
        return _tree_states(node, choose, mapping)
    out = prefix_of(node, choose)
    if mapping is not None:
        keyed, _ = jax.tree_util.tree_flatten_with_path(out, is_leaf=_is_graph_object)
        for keypath, leaf in keyed:
            if _is_graph_object(leaf):
                remember(leaf, mapping, keypath_to_path(keypath))
    return out


def _first_match(filter_map: Mapping[Filter, Any]) -> Callable[[Path, Any], Any]:
    """`(path, leaf) -> value` of the first filter of `filter_map` that matches."""
    predicates = [(to_predicate(f), value) for f, value in filter_map.items()]

    def choose(path: Path, leaf: object) -> Any:
        for predicate, value in predicates:
            if predicate(path, leaf):
                return value
        raise ValueError(
            f"No filter matched leaf at path {tuple(path)!r} with value {leaf!r}. Filters: "
            f"{list(filter_map)}. Add a filter for it, or end the mapping with `...: None` "
            "to give every other leaf None."
        )

    return choose


def _is_graph_object(value: object) -> bool:
    return isinstance(value, SHARED_TYPES)


def _tree_states(
    node: object, choose: Callable[[Path, Any], Any], mapping: Mapping[Filter, Any] | None
) -> Any:
    """`prefix(node, choose, graph=True)`: a `TreeState` per graph node of `node`, the
    nodes split jointly (a later place of a shared one holds an empty State); `mapping`,
    the `{filter: value}` that `choose` reads, is remembered with each `tree_prefix`."""
    keyed, treedef = jax.tree_util.tree_flatten_with_path(node, is_leaf=_is_graph_object)
    marked = treedef.flatten_up_to(mark_aliases(node)[0])
    splits = treedef.flatten_up_to(to_tree(node))
    leaves = []
    for (keypath, leaf), alias_or_node, split in zip(keyed, marked, splits, strict=True):
        base = keypath_to_path(keypath)
        if not _is_graph_object(leaf):
            leaves.append(choose(base, leaf))
            continue
        values = {
            path: choose(base + path, value) for path, value in split.state.flat_state().items()
        }
        tree_prefix = prefix_of(alias_or_node, choose, base)
        if mapping is not None and _is_graph_object(tree_prefix):
            remember(tree_prefix, mapping, base)
        state = State.from_flat_path(values)
        leaves.append(TreeState(split.graphdef, state, Opaque(choose), Opaque(tree_prefix)))
    return treedef.unflatten(leaves)
