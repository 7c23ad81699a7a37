"""The checks every lifted transform makes of its prefixes (`in_axes`, `out_axes`,
`in_shardings`, `argnums`) when it is built, so that a wrong prefix fails at decoration
with the transform's name and the prefix's path, not somewhere inside the first call.
"""

from __future__ import annotations

import jax

from bryo_graph import Variable, iter_graph

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
        return value is None or isinstance(value, mappings) or is_graph_leaf(value)

    for keypath, leaf in jax.tree_util.tree_leaves_with_path(prefix, is_leaf=is_leaf):
        where = f"`{name}`{jax.tree_util.keystr(keypath)}"
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
