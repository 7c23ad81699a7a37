"""The checks every lifted transform makes of its prefixes (`in_axes`, `out_axes`,
`in_shardings`, `argnums`) when it is built, so that a wrong prefix fails at decoration
with the transform's name and the prefix's path, not somewhere inside the first call.
"""

from __future__ import annotations

import jax

from bryo_graph import Variable, iter_graph
from bryo_graph.extract import TreeState

from ._layout import is_graph_leaf


def check_prefix(
    prefix: object,
    name: str,
    transform: str,
    *,
    graph_updates: bool,
    mappings: tuple[type, ...],
) -> None:
    """Refuse what no prefix may hold, as Flax NNX does.

    A Variable is never a prefix (the prefix of a Variable is one value for the whole
    Variable); a model (a graph node holding Variables) is none in graph mode with updates
    (its State is divided by a mapping, e.g. `StateAxes`; a module-shaped prefix that
    `prefix` built holds values, not Variables, and is taken); the mappings (`mappings`:
    `StateAxes`, `StateSharding`, `DiffState`) need graph mode with updates, simple mode
    seeing models as pytrees.

    Raises:
        ValueError: naming the prefix (`name`), the transform and where in the prefix.
    """

    def is_leaf(value: object) -> bool:
        return value is None or isinstance(value, (*mappings, TreeState)) or is_graph_leaf(value)

    for keypath, leaf in jax.tree_util.tree_leaves_with_path(prefix, is_leaf=is_leaf):
        where = f"`{name}`{jax.tree_util.keystr(keypath)}"
        if isinstance(leaf, TreeState) and graph_updates:
            raise ValueError(
                f"Found a `TreeState` at {where} of `{transform}`: `TreeState` prefixes "
                "(from `prefix(..., graph=True)`) are for graph mode without updates. Pass "
                f"`graph_updates=False` to `{transform}`, or make a pytree prefix with "
                "`prefix(..., graph=False)`."
            )
        if isinstance(leaf, TreeState):
            continue
        if isinstance(leaf, Variable):
            raise ValueError(
                f"Found a {type(leaf).__name__} at {where} of `{transform}`: Variables "
                "prefixes are not supported. Give one axis (or sharding) for the whole "
                "Variable instead of a Variable holding it."
            )
        if isinstance(leaf, mappings) and not graph_updates:
            kind = type(leaf).__name__
            raise ValueError(
                f"{where} of `{transform}` cannot contain `{kind}` objects when `graph=False` "
                f"or `graph_updates=False`: simple mode sees models as pytrees. Use "
                f"`prefix(model, {{filter: ...}})` for a pytree prefix of a model, or graph "
                f"mode with updates (`{transform}(..., graph=True, graph_updates=True)`)."
            )
        if graph_updates and is_graph_leaf(leaf) and _holds_variables(leaf):
            raise ValueError(
                f"Found a {type(leaf).__name__} at {where} of `{transform}`: Graph nodes are "
                "not allowed as prefixes in graph mode. Divide a node's State with a mapping "
                "(e.g. `StateAxes({filter: axis, ...})`), or use simple mode "
                f"(`{transform}(..., graph=False)`) with `prefix(model, ...)`."
            )


def _holds_variables(node: object) -> bool:
    return any(isinstance(value, Variable) for _, value in iter_graph(node))


def _is_prefix_leaf(value: object) -> bool:
    return value is None or isinstance(value, TreeState)


def _has_tree_state(prefix: object) -> bool:
    if isinstance(prefix, int | None):  # the common prefixes: no walk
        return False
    leaves = jax.tree_util.tree_leaves(prefix, is_leaf=_is_prefix_leaf)
    return any(isinstance(leaf, TreeState) for leaf in leaves)


def expand_tree_states(prefix: object, tree: object) -> object:
    """`prefix` (of `tree`) with each `TreeState` replaced by the prefix its `prefix_fn`
    gives the part of `tree` at its place (every place of a shared Variable gets its own
    value, so that two that differ are found); `prefix` itself if it holds none."""
    if not _has_tree_state(prefix):
        return prefix

    def expand(leaf: object, subtree: object) -> object:
        return leaf.prefix_for(subtree) if isinstance(leaf, TreeState) else leaf

    return jax.tree.map(expand, prefix, tree, is_leaf=_is_prefix_leaf)


def tree_state_prefixes(prefix: object) -> object:
    """`prefix` with each `TreeState` replaced by its `tree_prefix` (the prefix of the
    node it was made for, following its pytree structure, an `Alias` for a later place of
    a shared node): what JAX takes as an output's prefix before the output exists."""
    if not _has_tree_state(prefix):
        return prefix

    def unwrap(leaf: object) -> object:
        return leaf.tree_prefix.value if isinstance(leaf, TreeState) else leaf

    return jax.tree.map(unwrap, prefix, is_leaf=_is_prefix_leaf)
