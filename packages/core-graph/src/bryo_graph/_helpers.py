"""Small graph utilities of Flax NNX 0.12: `dataclass`, `map`, `map_state`,
`recursive_map`, `iter_children`, `as_pure` and `set_metadata`.

They are thin layers over `split`/`merge`/`clone` and the node types: `map` maps a
function over a graph's State and merges the result, `recursive_map` rebuilds a copy of
a graph bottom-up through a function of `(path, node)` (the copy shares the Variables),
`iter_children` lists a node's direct graph-node children.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import jax

from bryo_filters import Filter
from bryo_pytree import Key, Path, path_str

from ._graph import clone, merge, split, state
from ._modes import graph_mode
from ._nodes import node_types
from ._object import Object, checks_after_init
from ._state import State
from ._tree_mode import check_pytree
from ._variables import Variable

A = TypeVar("A")


def dataclass(cls: type[A] | None = None, /, **options: Any) -> Any:
    """`dataclasses.dataclass` for `Object`/`Pytree`/Module classes, as Flax's
    `nnx.dataclass`: the class keeps its own `__repr__` (`repr=False`), and fields may
    be declared `x: T = data()` / `static()`.

    Args:
        cls: the class (or use `@dataclass(kw_only=True, ...)`).
        **options: `dataclasses.dataclass` options, except `repr`.

    Returns:
        The dataclass.
    """
    if "repr" in options:
        raise TypeError(
            "`dataclass` keeps the class's own `__repr__`; drop `repr=` (use "
            "`dataclasses.dataclass` directly for a generated one)."
        )
    if cls is None:
        return lambda c: _dataclass(c, options)
    return _dataclass(cls, options)


def _dataclass(cls: type[A], options: dict[str, Any]) -> type[A]:
    cls = dataclasses.dataclass(cls, repr=False, **options)
    if isinstance(cls, type) and issubclass(cls, Object) and cls._object__pytree:
        checks_after_init(cls)  # the generated `__init__` checks static attributes too
    return cls


def map_state(f: Callable[[Path, Any], Any], state: State, /) -> State:
    """A State with `f(path, leaf)` in place of every leaf of `state`."""
    return State.from_flat_path({path: f(path, leaf) for path, leaf in state.flat_state().items()})


def map(
    f: Callable[[Path, Any], Any],
    node: A,
    /,
    *,
    graph: bool | None = None,
    recreate_variables: bool = True,
) -> A:
    """A new graph like `node` with `f(path, variable)` in place of each of its State
    leaves (live Variables, so `f` may also update them in place and return them).

    Args:
        f: `(path, leaf) -> new leaf` (a Variable, or a raw value for a raw leaf).
        node: a graph node, or a bare Variable (then `f((), variable)` is returned).
        graph: False maps in tree mode.
        recreate_variables: False puts a raw value `f` returns for a Variable in the
            new graph as it is (True wraps it in a Variable of the old one's type).

    Returns:
        The new graph (its nodes are new; its Variables are what `f` returned).

    Example:
        >>> zeros = map(lambda path, v: v.replace(jnp.zeros_like(v)), model)  # doctest: +SKIP
    """
    graphdef, state = split(node, graph=graph)
    mapped = map_state(f, state) if isinstance(state, State) else f((), state)
    return merge(graphdef, mapped, recreate_variables=recreate_variables)


def recursive_map(f: Callable[[Path, Any], Any], node: A, /, *, graph: bool | None = None) -> A:
    """Apply `f(path, value)` to every node, Variable and leaf of a copy of `node`,
    children first, and set what it returns in their place.

    The copy has new nodes and the original's Variables (`clone(variables=False)`), so
    setting attributes on the nodes `f` receives leaves `node` unchanged.

    Raises:
        ValueError: a node that cannot take a new child in place (a tuple) when `f`
            returned a new value for one of its children.
    """
    copy = clone(node, variables=False, graph=graph)
    registry = node_types()
    results: dict[int, object] = {}

    def visit(path: Path, value: object) -> object:
        if id(value) in results:
            return results[id(value)]
        node_type = registry.lookup(type(value))
        if node_type is not None:
            children, _ = node_type.flatten(value)
            for key, child in list(children):
                new = visit((*path, key), child)
                if new is child:
                    continue
                if node_type.set_key is None:
                    raise ValueError(
                        f"`recursive_map` cannot set {key!r} of the {type(value).__name__} at "
                        f"{path_str(path) or 'the root'}: it does not change in place. Return "
                        "the value unchanged for the children of immutable nodes."
                    )
                node_type.set_key(value, key, new)
        new_value = f(path, value)
        if node_type is not None or isinstance(value, Variable):
            results[id(value)] = new_value
        return new_value

    return visit((), copy)  # type: ignore[return-value]  # f returns the new root


def iter_children(node: object, /, *, graph: bool | None = None) -> Iterator[tuple[Key, Any]]:
    """`(key, child)` for each direct child of `node` that is a graph node (a module, a
    `List`, an `Rngs`, ...); Variables, arrays and plain dicts, lists and tuples are not
    listed.

    Raises:
        ValueError: `node` is not a graph node; in tree mode (`graph=False`), an Object of
            a `pytree=False` class.
    """
    if not graph_mode(graph):  # the same children, but tree mode walks only pytrees
        check_pytree(node, (), "iter_children")
    registry = node_types()
    node_type = registry.lookup(type(node))
    if node_type is None:
        raise ValueError(
            f"`iter_children` takes a graph node (a module, List, Dict, ...); got "
            f"{type(node).__name__}."
        )
    for key, child in node_type.flatten(node)[0]:
        child_type = registry.lookup(type(child))
        if child_type is not None and child_type.type not in (dict, list, tuple):
            yield key, child


def as_pure(tree: A) -> A:
    """`tree` with every Variable replaced by its raw value (for export or serialization).

    >>> as_pure({"w": Variable(1.0), "n": 2})
    {'n': 2, 'w': 1.0}
    """

    def pure(leaf: object) -> object:
        return as_pure(leaf.get_raw_value()) if isinstance(leaf, Variable) else leaf

    return jax.tree.map(pure, tree, is_leaf=lambda x: isinstance(x, Variable))


def set_metadata(node: object, /, *, only: Filter = Variable, **metadata: object) -> None:
    """Set `metadata` on every Variable of `node` that `only` selects, in place.

    Args:
        node: a graph node (a module).
        only: a filter of the Variables to change (default: all of them).
        **metadata: the entries to set (`set_metadata(model, tag='frozen')`).
    """
    if not metadata:
        raise TypeError(
            "`set_metadata(node, **metadata)` needs at least one metadata keyword, e.g. "
            "`set_metadata(model, only=nnx.Param, sharding_rules=...)`."
        )
    selected = state(node, only)
    for leaf in selected.flat_state().values():
        if isinstance(leaf, Variable):
            leaf.set_metadata(**metadata)
