"""Small graph utilities of Flax NNX 0.12: `dataclass`, `map`, `map_state`,
`recursive_map`, `iter_children`, `find_duplicates`, `call`, `cached_partial`, `as_pure`,
`set_metadata` and `with_vars`.

They are thin layers over `split`/`merge`/`clone` and the node types: `map` maps a
function over a graph's State and merges the result, `recursive_map` rebuilds a copy of
a graph bottom-up through a function of `(path, node)` (the copy shares the Variables),
`iter_children` lists a node's direct graph-node children, `with_vars` converts a graph's
Variables to (or from) array-ref backed ones.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, TypeVar

import jax

from bryo_filters import Filter, Predicate, to_predicate
from bryo_pytree import Key, Path, path_str

from ._calls import MethodCaller
from ._graph import GraphDef, clone, flat_graph, flatten, merge, split, state
from ._modes import graph_mode
from ._modes import graph_updates as _graph_updates
from ._nodes import node_types
from ._object import Dict, List, Object, checks_after_init
from ._state import State
from ._tree_mode import check_pytree
from ._var_defaults import check_flag
from ._variables import Variable

A = TypeVar("A")

PureState = tuple[GraphDef[A], State]
"""The `(graphdef, state)` pair `split` returns, as a type: `PureState[Model]`-style
annotations read `tuple[GraphDef[Model], State]`."""

_CONTAINERS = (dict, list, tuple)  # walked anew at each occurrence, as JAX walks pytrees


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


def find_duplicates(node: object, /, *, only: Filter = ...) -> list[list[Path]]:
    """The paths of every graph node and Variable that `node` reaches more than once.

    Each inner list holds the paths of one shared module, `List`, `Rngs`, ... or
    Variable, in walking order (attributes sorted), the first path first. Plain dicts,
    lists and tuples are walked at each occurrence and never reported themselves (JAX
    copies them), but what they hold is.

    >>> from bryo_graph import Object, Param
    >>> class Tied(Object):
    ...     def __init__(self):
    ...         self.a = Param(1.0)
    ...         self.b = self.a
    >>> find_duplicates(Tied())
    [[('a',), ('b',)]]

    Args:
        node: a graph node.
        only: a filter of the nodes and Variables to consider (default: all).

    Returns:
        One list of paths per duplicated node or Variable.
    """
    predicate = to_predicate(only)
    registry = node_types()
    found: dict[int, list[Path]] = {}
    visited: set[int] = set()
    open_containers: set[int] = set()  # plain containers being walked (a cycle check)
    walked: list[object] = []  # keeps nodes a `flatten` makes on the fly alive (their ids)
    # (value, path, children): `children` is None until the value's children are listed
    stack: list[tuple[object, Path, Iterator[tuple[Key, object]] | None]] = [(node, (), None)]
    while stack:
        value, path, children = stack[-1]
        if children is None:
            node_type = registry.lookup(type(value))
            if node_type is not None and node_type.type in _CONTAINERS:
                if id(value) in open_containers:
                    raise ValueError(
                        f"`find_duplicates` met a plain {type(value).__name__} that contains "
                        f"itself, at {path_str(path)}; a cyclic graph needs `List`/`Dict`."
                    )
                open_containers.add(id(value))
            elif node_type is not None or isinstance(value, Variable):
                seen = id(value) in visited
                if predicate(path, value):
                    found.setdefault(id(value), []).append(path)
                if seen or node_type is None:
                    stack.pop()
                    continue
                visited.add(id(value))
                walked.append(value)
            else:  # a leaf
                stack.pop()
                continue
            children = iter(list(node_type.flatten(value)[0]))
            stack[-1] = (value, path, children)
        child = next(children, None)  # children are (key, value) pairs, never None
        if child is None:
            stack.pop()
            open_containers.discard(id(value))
        else:
            key, child_value = child
            stack.append((child_value, (*path, key), None))
    return [paths for paths in found.values() if len(paths) > 1]


def call(graphdef_state: tuple, /) -> MethodCaller:
    """Call a method of the graph that a `(graphdef, state)` pair describes, purely.

    `call(pair)(x)` calls the node, `call(pair).method(x)` or `call(pair)['b'].method(x)`
    a method reached by attribute and item access; each returns `(output, new_pair)`, the
    graph split again after the call. The pair given is unchanged (the call runs on
    copies of its Variables), so `call` fits inside `jax.jit`:

    >>> @jax.jit                                             # doctest: +SKIP
    ... def forward(x, pair):
    ...     return call(pair)(x)  # (y, pair after the call)

    Args:
        graphdef_state: what `split(node)` returned: a GraphDef (or tree mode's TreeDef)
            and its States.

    Returns:
        The proxy that picks and calls the method.
    """
    if not isinstance(graphdef_state, tuple) or len(graphdef_state) < 2:
        raise TypeError(
            "`call` takes the `(graphdef, state)` pair `split` returned, e.g. "
            f"`call(nnx.split(model))(x)`; got {type(graphdef_state).__name__}."
        )
    graphdef, *states = graphdef_state
    if not isinstance(graphdef, GraphDef):
        raise TypeError(
            "`call` takes the `(graphdef, state)` pair `split` returned; its first item is "
            f"a {type(graphdef).__name__}, not a GraphDef."
        )
    return graphdef.apply(*states)


def cached_partial(
    f: Callable[..., A],
    /,
    *cached_args: object,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Callable[..., A]:
    """`f` with its first arguments given, for a step function called again and again
    with the same models (`train_step(model, optimizer, x, y)`), as Flax's
    `nnx.cached_partial`.

    As in Flax, `f` gets copies of the given modules (and `List`s, `Dict`s) that share
    their Variables, made once: what `f` writes into Variables is seen in the given
    modules, and a module `f` returns is the copy, the same object every call. `f` must
    leave the copies' structure as it found it (attributes, submodules, which Variable
    sits where): a change raises a `ValueError` after the call, as in Flax, because the
    given modules would not see it (the next call copies them again). Unlike Flax's, a
    structure change made to the given modules between calls is picked up: the next
    call copies them again. Like Flax's, it is a graph-mode API (`graph=True`,
    `graph_updates=True`, the defaults unless `set_graph_mode`/`set_graph_updates`
    changed them).

    Args:
        f: the function, usually a lifted transform such as `nnx.jit(train_step)`.
        *cached_args: its first positional arguments (the models).
        graph: graph mode (None: the current default); must be True.
        graph_updates: state updates flow back (None: the current default); must be True.

    Returns:
        The function of the remaining arguments.
    """
    if not graph_mode(graph) or not _graph_updates(graph_updates):
        raise ValueError(
            "`cached_partial` is a graph-mode API and needs graph=True and "
            "graph_updates=True; got tree mode or graph_updates=False. Use "
            "`functools.partial` in tree mode, or `nnx.compat.cached_partial`."
        )
    copies = _SharingCopies(cached_args)

    @functools.wraps(f)
    def cached(*args: object, **kwargs: object) -> A:
        given = copies.current()
        out = f(*given, *args, **kwargs)
        copies.check_unchanged(f)
        return out

    return cached


def _is_mutable_node(value: object) -> bool:
    return isinstance(value, Object | List | Dict | Variable)


class _SharingCopies:
    """`cached_partial`'s arguments with each module (`List`, `Dict`) replaced by a copy
    sharing its Variables, remade when the given modules' structure changes."""

    def __init__(self, given: tuple) -> None:
        leaves, self._treedef = jax.tree.flatten(given, is_leaf=_is_mutable_node)
        self._leaves = leaves
        self._at = [i for i, leaf in enumerate(leaves) if _is_mutable_node(leaf)]
        self._make()

    def _make(self) -> None:
        sources = tuple(self._leaves[i] for i in self._at)
        copies = merge(*split(sources)) if sources else ()
        leaves = list(self._leaves)
        for i, copy in zip(self._at, copies, strict=True):
            leaves[i] = copy
        self._args: tuple = jax.tree.unflatten(self._treedef, leaves)
        self._source_flats: list[object] = [flat_graph(node) for node in sources]
        self._copies = list(copies)
        self._copy_structures = [_structure(copy) for copy in copies]

    def current(self) -> tuple:
        """The arguments to pass now (copied again if a given module changed structure)."""
        for i, flat in zip(self._at, self._source_flats, strict=True):
            if flat_graph(self._leaves[i]) is not flat:
                self._make()
                break
        return self._args

    def check_unchanged(self, f: Callable) -> None:
        """Raise a `ValueError` if the call changed a copy's structure."""
        for k, (copy, before) in enumerate(zip(self._copies, self._copy_structures, strict=True)):
            if flat_graph(copy) is before.flat:
                continue
            after = _structure(copy)
            if after.graphdef != before.graphdef or not _same_objects(after.leaves, before.leaves):
                self._source_flats[k] = None  # copy again at the next call
                raise ValueError(
                    f"{getattr(f, '__name__', 'the function')!r}, given a "
                    f"{type(self._leaves[self._at[k]]).__name__} by `cached_partial`, changed "
                    "its structure (an attribute, a submodule, or which Variable sits where): "
                    "`cached_partial` passes a copy sharing the module's Variables, so the "
                    "module you gave would not see that change. Undo temporary changes before "
                    "returning (`nnx.pop` what was sown), or pass the module as an argument "
                    "instead (`functools.partial` or `nnx.jit` directly)."
                )
            self._copy_structures[k] = after


class _Structure(NamedTuple):
    """A graph's flattening, GraphDef and leaves (its Variables), to tell a change."""

    flat: object
    graphdef: object
    leaves: list


def _structure(node: object) -> _Structure:
    graphdef_, leaves = flatten(node, with_paths=False)
    return _Structure(flat_graph(node), graphdef_, leaves)


def _same_objects(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def as_pure(tree: A) -> A:
    """`tree` with every Variable replaced by its raw value (for export or serialization).

    >>> as_pure({"w": Variable(1.0), "n": 2})
    {'n': 2, 'w': 1.0}
    """

    def pure(leaf: object) -> object:
        return as_pure(leaf.get_raw_value()) if isinstance(leaf, Variable) else leaf

    return jax.tree.map(pure, tree, is_leaf=lambda x: isinstance(x, Variable))


pure = as_pure  # Flax NNX's older name


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


def with_vars(
    node: A,
    /,
    *,
    hijax: bool | None = None,
    ref: bool | None = None,
    only: Filter = ...,
    allow_duplicates: bool = False,
) -> A:
    """A copy of `node` whose Variables are array-ref backed (`ref=True`) or not
    (`ref=False`), hijax ones (`hijax=True`) or not, as Flax 0.12's `nnx.with_vars`.

    Only the Variables that differ from the request and match `only` are copied
    (`Variable.copy(ref=..., hijax=...)`: a new ref of the value, or the value out of its ref); the
    others are shared with `node`. The graph's nodes are new.

    >>> import jax
    >>> from bryo_graph import Param
    >>> model = {"w": Param(1.0), "b": Param(0.0)}
    >>> refs = with_vars(model, ref=True, only=lambda path, v: path[0] == "w")
    >>> refs["w"].ref, isinstance(refs["w"].get_raw_value(), jax.Ref), refs["b"] is model["b"]
    (True, True, True)

    Args:
        node: a graph, State or bare Variable.
        hijax: True for hijax Variables (JAX 0.10 or newer), False for plain ones, None
            to keep them.
        ref: True for ref-backed Variables, False for plain ones, None to keep them.
        only: a filter of the Variables to convert (all by default).
        allow_duplicates: convert a Variable reached by several paths anyway (its
            copies then differ per path); by default that is a ValueError naming them.

    Returns:
        The converted copy of `node`.
    """
    if hijax is not None:
        check_flag("hijax", hijax, "`with_vars`")
    if ref is not None:
        check_flag("ref", ref, "`with_vars`")
    if ref is None and hijax is None:
        return map(lambda path, leaf: leaf, node, recreate_variables=False)
    selected = to_predicate(only)
    flags = {k: v for k, v in (("ref", ref), ("hijax", hijax)) if v is not None}

    def converts(path: Path, value: object) -> bool:
        return (
            isinstance(value, Variable)
            and any(getattr(value, k) is not v for k, v in flags.items())
            and selected(path, value)
        )

    if not allow_duplicates:
        _refuse_duplicates(node, converts)

    def convert(path: Path, leaf: Any) -> Any:
        return leaf.copy(**flags) if converts(path, leaf) else leaf

    return map(convert, node, recreate_variables=False)


def _refuse_duplicates(node: object, converts: Predicate) -> None:
    """A ValueError naming the paths of a Variable to convert that `node` shares."""
    duplicates = find_duplicates(node, only=converts)
    if duplicates:
        listed = "; ".join(", ".join(path_str(p) for p in paths) for paths in duplicates)
        raise ValueError(
            f"Found duplicate at paths {listed}: `with_vars` would turn a Variable reached "
            "by several paths into one copy per path. Convert a model without shared Variables, "
            "narrow `only=`, or pass `allow_duplicates=True`."
        )


def vars_as(
    node: A,
    /,
    *,
    hijax: bool | None = None,
    ref: bool | None = None,
    only: Filter = ...,
    allow_duplicates: bool = False,
) -> A:
    """The older name of `with_vars` (deprecated in Flax 0.12): warns, then converts."""
    warnings.warn(
        "`vars_as` is deprecated; use `with_vars` (same arguments).",
        DeprecationWarning,
        stacklevel=2,
    )
    return with_vars(node, hijax=hijax, ref=ref, only=only, allow_duplicates=allow_duplicates)
