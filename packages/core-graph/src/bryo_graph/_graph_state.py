"""`GraphState`: a State bundled with the GraphDef it belongs to (Flax NNX 0.12's
`nnx.unpack`), so a model's parts can travel without a separate GraphDef.

A GraphState reads and writes like its State (items, attributes, `in`), is a JAX pytree
with the State's own paths (the GraphDef rides in the treedef, so `jax.grad` of a
function of GraphStates returns GraphStates), and `merge(*graph_states)` rebuilds the
model from GraphStates of one `unpack`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, MutableMapping
from typing import Any

import jax

from bryo_pytree import Key

from ._nodes import NodeType
from ._state import (
    State,
    _state_flatten,
    _state_flatten_with_keys,
    _state_unflatten,
    state_flatten,
    state_node_type,
    state_unflatten,
)


class GraphState(MutableMapping):
    """A `State` with its GraphDef: what `unpack(node, *filters)` returns, one per filter.

    Attributes:
        _graphdef: the GraphDef (or tree-mode TreeDef) of the node it was unpacked from.
        _state: the State it reads and writes through.
    """

    __slots__ = ("_graphdef", "_state")

    def __init__(self, graphdef: Any, state: Any) -> None:
        object.__setattr__(self, "_graphdef", graphdef)
        object.__setattr__(self, "_state", state)

    def __getitem__(self, key: Key) -> Any:
        return self._state[key]

    def __setitem__(self, key: Key, value: object) -> None:
        self._state[key] = value

    def __delitem__(self, key: Key) -> None:
        del self._state[key]

    def __iter__(self) -> Iterator[Key]:
        return iter(self._state)

    def __len__(self) -> int:
        return len(self._state)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._state, name)

    def __setattr__(self, name: str, value: object) -> None:
        setattr(self._state, name, value)

    def __repr__(self) -> str:
        return f"GraphState({self._state!r})"


def _flatten_with_keys(node: GraphState) -> tuple[list, tuple]:
    keyed, paths = _state_flatten_with_keys(node._state)
    return keyed, (node._graphdef, paths)


def _flatten(node: GraphState) -> tuple[list, tuple]:
    leaves, paths = _state_flatten(node._state)
    return leaves, (node._graphdef, paths)


def _unflatten(aux: tuple, children: Iterable[Any]) -> GraphState:
    graphdef, paths = aux
    return GraphState(graphdef, _state_unflatten(paths, list(children)))


jax.tree_util.register_pytree_with_keys(
    GraphState, _flatten_with_keys, _unflatten, flatten_func=_flatten
)


# A GraphState is also a graph node, as its State is (`state(grads, Param)` of `unpack`ed grads)


def _graph_state_flatten(node: GraphState) -> tuple[list[tuple[Key, object]], Any]:
    return state_flatten(node._state)[0], node._graphdef


def _graph_state_unflatten(cls: type, graphdef: Any, children: list[tuple[Key, object]]) -> Any:
    return GraphState(graphdef, state_unflatten(State, None, children))


def graph_state_node_type() -> NodeType:
    """The NodeType of `GraphState`: a State's, with its GraphDef as the aux (`set_key` goes
    through `GraphState.__setitem__` to the State)."""
    return dataclasses.replace(
        state_node_type(),
        type=GraphState,
        flatten=_graph_state_flatten,
        unflatten=_graph_state_unflatten,
    )


def graph_states_parts(first: GraphState, rest: tuple) -> tuple[Any, list[State]]:
    """The GraphDef and States of GraphStates given to `merge`, checked to be GraphStates
    of one `unpack` (one GraphDef)."""
    given = (first, *rest)
    for i, item in enumerate(given):
        if not isinstance(item, GraphState):
            raise ValueError(
                f"Expected GraphState object at position {i} of `merge`, got "
                f"{type(item).__name__}: merge GraphStates only with GraphStates (from one "
                "`unpack`), or pass `merge(graphdef, *states)`."
            )
    for i, item in enumerate(given[1:], 1):
        if item._graphdef != first._graphdef:
            raise ValueError(
                f"GraphDef must be the same for all GraphState objects given to `merge`; the "
                f"one at position {i} differs from the first. Merge the GraphStates of one "
                "`unpack` call."
            )
    return first._graphdef, [item._state for item in given]
