"""`bryo_graph.extract`: `to_tree`/`from_tree` and the pieces they are made of (Flax NNX's
`nnx.extract` names that bryo has), and `TreeState`, the prefix of one graph node that
`prefix(..., graph=True)` returns for the lifted transforms in simple mode."""

from __future__ import annotations

import dataclasses as _dataclasses
from collections.abc import Callable as _Callable
from typing import Any as _Any
from typing import Generic as _Generic
from typing import TypeVar as _TypeVar

import jax as _jax

from bryo_pytree import keypath_to_path

from ._to_tree import Missing as Missing
from ._to_tree import NodeStates as NodeStates
from ._to_tree import broadcast_prefix as broadcast_prefix
from ._to_tree import check_consistent_aliasing as check_consistent_aliasing
from ._to_tree import clear_non_graph_nodes as clear_non_graph_nodes
from ._to_tree import default_split_fn as default_split_fn
from ._to_tree import from_tree as from_tree
from ._to_tree import is_tree_node as is_tree_node
from ._to_tree import merge_tree_node as merge_tree_node
from ._to_tree import to_tree as to_tree
from ._variables import Variable as _Variable

_V = _TypeVar("_V")


@_dataclasses.dataclass(frozen=True, slots=True)
class Opaque(_Generic[_V]):
    """A value carried in a pytree's static data without taking part in its equality:
    two `Opaque`s are equal (a function kept with a prefix must not make two prefixes of
    one structure differ)."""

    value: _V

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return 0


@_dataclasses.dataclass(frozen=True, slots=True)
class TreeState:
    """One graph node (module, `List`/`Dict`, Variable) of a pytree, as Flax NNX's
    `nnx.extract.TreeState`: its `graphdef` and its `state`. `prefix(nodes, ..., graph=True)`
    returns one per graph node holding prefix values in its `state` (a later place of a
    node met earlier has an empty `state`: it is the first place's), with the function
    that chose them (`prefix_fn`) and `tree_prefix`, the same prefix following the
    node's pytree structure: the lifted transforms in simple mode read a TreeState
    prefix through them (`prefix_fn` gives each place of a shared Variable its own
    prefix, so that two that differ are refused). A pytree whose leaves are `state`'s.

    Example:
        >>> first, second = prefix((model, model), {Param: 0}, graph=True)  # doctest: +SKIP
        >>> first.state["kernel"], second.state  # doctest: +SKIP
        (0, State({}))
    """

    graphdef: _Any
    state: _Any
    prefix_fn: Opaque[_Callable[[tuple, _Any], _Any] | None] = Opaque(None)
    tree_prefix: Opaque[_Any] = Opaque(None)

    def replace(self, **changes: _Any) -> TreeState:
        """A copy with `changes` (`graphdef=`, `state=`, ...) applied."""
        return _dataclasses.replace(self, **changes)

    def prefix_for(self, node: object) -> _Any:
        """`node`'s prefix following its pytree structure: `prefix_fn(path, leaf)` at each
        Variable (and array leaf), `path` starting at `node`.

        Raises:
            ValueError: this TreeState has no `prefix_fn` (it was not made by `prefix`).
        """
        choose = self.prefix_fn.value
        if not callable(choose):
            raise ValueError(
                "A `TreeState` used as a prefix (e.g. in `in_axes`) must come from "
                "`prefix(..., graph=True)` or carry a `prefix_fn` with signature "
                f"`(path, leaf) -> prefix`; this one has {type(choose).__name__}."
            )
        return prefix_of(node, choose)


def prefix_of(node: object, choose: _Callable[[tuple, _Any], _Any], base: tuple = ()) -> _Any:
    """`node`'s pytree structure with `choose(base + path, leaf)` in place of each Variable
    and array leaf, `path` the NNX path from `node` (`('layers', 0, 'kernel')`): the
    prefix `prefix` builds."""

    def leaf_prefix(keypath: tuple, leaf: object) -> _Any:
        return choose(base + keypath_to_path(keypath), leaf)

    return _jax.tree_util.tree_map_with_path(
        leaf_prefix, node, is_leaf=lambda x: isinstance(x, _Variable)
    )


def is_tree_state(value: object) -> bool:
    """Whether `value` is a `TreeState`."""
    return isinstance(value, TreeState)


_jax.tree_util.register_pytree_node(
    TreeState,
    lambda ts: ((ts.state,), (ts.graphdef, ts.prefix_fn, ts.tree_prefix)),
    lambda aux, children: TreeState(aux[0], children[0], aux[1], aux[2]),
)
