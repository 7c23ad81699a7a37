"""`State`: a nested mapping of a model's state, stored flat by path.

A State reads like nested dicts (`state['linear']['kernel']`, `state.linear.kernel`) and
prints nested, but keeps one flat `{path: leaf}` dict inside, so that splitting,
filtering and merging states cost one pass over the leaves. A sub-mapping left empty (a
State built with `{'b': {}}`, or whose last leaf under `'b'` was deleted) is kept, as in
Flax NNX 0.12, beside the leaves. It is a registered pytree that flattens as Flax's does:
its children are its top-level entries, in sorted key order, each a leaf (usually a
Variable) or nested plain dicts of the leaves below it, so that `jax.tree_util`'s key paths
name one key per level (`DictKey('linear'), DictKey('kernel')`). Two States with the same
paths have the same treedef whatever order their paths were inserted in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any as _Any
from typing import cast, overload

import jax
from jax.tree_util import DictKey, register_pytree_with_keys

from bryo_filters import Filter, filters_to_predicates
from bryo_pytree import Key, Path, PyTreeDef, path_str, unflatten_paths

from ._nodes import NodeType
from ._variables import Variable


class _Paths:
    """State aux data: the tuple of paths (and of the empty sub-mappings' paths), hashed
    once so jit's cache lookups stay cheap."""

    __slots__ = ("_hash", "_layout", "empties", "paths")

    def __init__(self, paths: tuple[Path, ...], empties: tuple[Path, ...] = ()) -> None:
        self.paths = paths
        self.empties = empties
        self._hash = hash((paths, empties))
        self._layout: _Layout | None = None

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, _Paths)
            and self.paths == other.paths
            and self.empties == other.empties
        )

    def __repr__(self) -> str:
        if self.empties:
            return f"paths{list(self.paths)}, empty{list(self.empties)}"
        return f"paths{list(self.paths)}"

    def layout(self) -> _Layout:
        """How the (sorted) paths nest into the State's pytree children (built once)."""
        if self._layout is None:
            self._layout = _Layout.of(self)
        return self._layout


class State(Mapping[Key, _Any]):
    """A model's state: nested by path, printable, a pytree.

    >>> state = State({"linear": {"kernel": VariableState(Param, 1.0)}})  # doctest: +SKIP
    >>> state.flat_state()                                                # doctest: +SKIP
    {('linear', 'kernel'): VariableState(type=Param, value=1.0)}
    """

    __slots__ = ("_empties", "_prefix", "_root")

    def __init__(self, mapping: Mapping | None = None, /) -> None:
        flat: dict[Path, object] = {}
        empties: set[Path] = set()
        if mapping is not None:
            _flatten_nested(mapping, (), flat, empties)
        object.__setattr__(self, "_root", flat)
        object.__setattr__(self, "_prefix", ())
        object.__setattr__(self, "_empties", empties)

    @classmethod
    def _from_flat(cls, flat: dict[Path, object], empties: set[Path] | None = None) -> State:
        state = object.__new__(cls)
        object.__setattr__(state, "_root", flat)
        object.__setattr__(state, "_prefix", ())
        object.__setattr__(state, "_empties", set() if empties is None else empties)
        return state

    def _view(self, prefix: Path) -> State:
        """The sub-State under `prefix`: it reads and writes this State's storage."""
        state = object.__new__(type(self))
        object.__setattr__(state, "_root", self._root)
        object.__setattr__(state, "_prefix", prefix)
        object.__setattr__(state, "_empties", self._empties)
        return state

    def _own_empties(self) -> set[Path]:
        """The paths of the empty sub-mappings, relative to this State."""
        empties, prefix = self._empties, self._prefix
        if not empties or not prefix:
            return set(empties)
        n = len(prefix)
        return {path[n:] for path in empties if len(path) > n and path[:n] == prefix}

    @property
    def _flat(self) -> dict[Path, object]:
        """`{path: leaf}` with paths relative to this State (a sub-State computes it)."""
        prefix = self._prefix
        if not prefix:
            return self._root
        n = len(prefix)
        return {path[n:]: leaf for path, leaf in self._root.items() if path[:n] == prefix}

    @classmethod
    def from_flat_path(
        cls, flat: Mapping[Path, object] | Iterable[tuple[Path, object]], /
    ) -> State:
        """Build a State from `{path: leaf}` pairs (a dict or an iterable of pairs)."""
        items = flat.items() if isinstance(flat, Mapping) else flat
        return cls._from_flat({tuple(path): leaf for path, leaf in items})

    @classmethod
    def _restore(cls, flat: dict[Path, object], empties: tuple[Path, ...] = ()) -> State:
        """A State of `flat` and empty sub-mappings at `empties` (copies and pickles)."""
        return cls._from_flat(flat, set(empties))

    from_flat_state = from_flat_path

    def flat_state(self) -> dict[Path, _Any]:
        """The `{path: leaf}` dict, in insertion order (a copy)."""
        return dict(self._flat)

    # Mapping over the first path step ------------------------------------------------
    def _top_keys(self) -> list[Key]:
        keys = dict.fromkeys(path[0] for path in self._flat if path)
        if self._empties:
            keys.update(dict.fromkeys(path[0] for path in sorted(self._own_empties())))
        return list(keys)

    def __iter__(self) -> Iterator[Key]:
        return iter(self._top_keys())

    def __treescope_repr__(self, path: str | None, subtree_renderer: object) -> object:
        """Rich display in notebooks (treescope, optional): see `_treescope`."""
        from ._treescope import render_state

        return render_state(self, path, subtree_renderer)

    def __len__(self) -> int:
        return len(self._top_keys())

    def __contains__(self, key: object) -> bool:
        return any(path and path[0] == key for path in self._flat) or (
            bool(self._empties) and any(path[0] == key for path in self._own_empties())
        )

    def __getitem__(self, key: Key) -> _Any:
        full = (*self._prefix, key)
        leaf = self._root.get(full, _MISSING)
        if leaf is not _MISSING:
            return leaf
        n = len(full)
        if not any(path[:n] == full for path in self._root) and not any(
            path[:n] == full for path in self._empties
        ):
            raise KeyError(f"{key!r} is not in this State; its keys are {self._top_keys()}")
        return self._view(full)

    def __getattr__(self, name: str) -> _Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError as error:
            raise AttributeError(str(error)) from None

    def __setitem__(self, key: Key, value: object) -> None:
        """Replace the subtree under `key` (a leaf, a State, or a nested mapping); a key
        the State lacks is added. A sub-State writes into the State it came from."""
        full = (*self._prefix, key)
        new: dict[Path, object] = {}
        empties: set[Path] = set()
        if isinstance(value, Mapping) and not isinstance(value, Variable):
            _flatten_nested(value, full, new, empties)
            if not new and not empties:
                empties.add(full)
        else:
            new[full] = value
        self._drop(full)
        self._root.update(new)
        if self._empties:  # the mappings above `full` are no longer empty
            self._empties.difference_update(full[:i] for i in range(1, len(full)))
        self._empties.update(empties)

    def __setattr__(self, name: str, value: object) -> None:
        self[name] = value

    def __delitem__(self, key: Key) -> None:
        """Remove the subtree under `key` (from the State a sub-State came from, too). A
        sub-State left without entries stays, empty (as a nested dict would)."""
        if not self._drop((*self._prefix, key)):
            raise KeyError(f"{key!r} is not in this State; its keys are {self._top_keys()}")
        prefix = self._prefix
        if prefix and not any(path[: len(prefix)] == prefix for path in self._root):
            if not any(path[: len(prefix)] == prefix for path in self._empties):
                self._empties.add(prefix)

    def _drop(self, full: Path) -> int:
        """Remove the leaves and empty sub-mappings under `full`; how many there were."""
        root, n = self._root, len(full)
        doomed = [path for path in root if path[:n] == full]
        for path in doomed:
            del root[path]
        empties = [path for path in self._empties if path[:n] == full]
        self._empties.difference_update(empties)
        return len(doomed) + len(empties)

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError as error:
            raise AttributeError(str(error)) from None

    def __reduce__(self) -> tuple:
        """Copies and pickles hold this State's own leaves (a sub-State's, relative)."""
        return (State._restore, (dict(self._flat), tuple(sorted_paths(self._own_empties()))))

    @property
    def raw_mapping(self) -> dict:
        """The State as nested plain dicts (Flax's view of a State's storage)."""
        return self.to_nested()

    # Filtering ------------------------------------------------------------------------
    @overload
    def filter(self, first: Filter, /) -> State: ...
    @overload
    def filter(self, first: Filter, second: Filter, /, *filters: Filter) -> tuple[State, ...]: ...
    def filter(self, first: Filter, /, *filters: Filter) -> State | tuple[State, ...]:
        """The sub-States matching each filter (first match wins); the rest is dropped."""
        states = group_flat(self._flat, (first, *filters), require_all=False)
        return states[0] if not filters else states

    @overload
    def split(self, first: Filter, /) -> State: ...
    @overload
    def split(self, first: Filter, second: Filter, /, *filters: Filter) -> tuple[State, ...]: ...
    def split(self, first: Filter, /, *filters: Filter) -> State | tuple[State, ...]:
        """Group every leaf by the first filter it matches; a leaf no filter matches raises."""
        states = group_flat(self._flat, (first, *filters), require_all=True)
        return states[0] if not filters else states

    @staticmethod
    def merge(state: State | Mapping, /, *states: State | Mapping) -> State:
        """One State with the leaves of all `states`; later ones win on equal paths."""
        flat: dict[Path, object] = {}
        for each in (state, *states):
            flat.update(_as_flat(each))
        return State._from_flat(flat)

    def __or__(self, other: State | Mapping) -> State:
        return State.merge(self, other)

    def __sub__(self, other: State | Mapping) -> State:
        """The leaves of this State whose paths `other` does not have."""
        theirs = _as_flat(other)
        return State._from_flat({p: v for p, v in self._flat.items() if p not in theirs})

    def to_pure_dict(self) -> dict:
        """Nested plain dicts holding the raw values (no Variables): `to_pure_dict(self)`."""
        return to_pure_dict(self)

    def replace_by_pure_dict(self, pure: Mapping) -> State:
        """A State like this one whose values come from nested plain dicts of raw values
        (this State unchanged; the function `replace_by_pure_dict` writes in place).

        Raises:
            ValueError: as `replace_by_pure_dict`.
        """
        return State._from_flat(self._flat | _pure_dict_updates(self, pure, None))

    def __repr__(self) -> str:
        return "State(" + _render(self.to_nested(), 0) + ")"

    def to_nested(self) -> dict:
        """Nested plain dicts holding the leaves as they are (an empty sub-mapping as `{}`)."""
        nested = cast(dict, unflatten_paths(self._flat))  # without a treedef: nested dicts
        for path in sorted_paths(self._own_empties()):
            level = nested
            for key in path:
                level = level.setdefault(key, {})
        return nested

    def __eq__(self, other: object) -> bool:
        """Equal paths and leaves; a nested plain mapping compares by its leaves too (as
        Flax's `State({}) == {}`)."""
        if not isinstance(other, Mapping):
            return NotImplemented
        if not isinstance(other, State):
            other = State(other)
        if (self._empties or other._empties) and self._own_empties() != other._own_empties():
            return False
        mine, theirs = self._flat, other._flat
        return mine.keys() == theirs.keys() and all(
            _leaf_equal(a, theirs[p]) for p, a in mine.items()
        )

    __hash__ = None


_MISSING = object()


def _leaf_equal(a: object, b: object) -> bool:
    if isinstance(a, Variable) and isinstance(b, Variable):
        return a.type is b.type and _leaf_equal(a.value, b.value)
    if a is b:
        return True
    try:
        import numpy as np

        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    except (TypeError, ValueError):  # tracers, keys, objects that are no arrays
        return False


def _render(node: object, depth: int) -> str:
    """Nested dicts as indented text, one entry per line; iterative (an explicit stack of
    the dicts being written), so a State of any depth prints."""
    if not isinstance(node, dict) or not node:
        return repr(node) if not isinstance(node, dict) else "{}"
    parts = ["{"]
    stack = [(iter(node.items()), depth)]
    first = True  # of the entries of the dict on top of the stack
    while stack:
        items, level = stack[-1]
        entry = next(items, None)
        if entry is None:
            stack.pop()
            parts.append("\n" + "  " * level + "}")
            first = False
            continue
        if not first:
            parts.append(",")
        key, child = entry
        parts.append(f"\n{'  ' * (level + 1)}{key!r}: ")
        first = isinstance(child, dict) and bool(child)
        if first:
            parts.append("{")
            stack.append((iter(child.items()), level + 1))
        else:
            parts.append(repr(child) if not isinstance(child, dict) else "{}")
    return "".join(parts)


def _flatten_nested(
    mapping: Mapping, prefix: Path, out: dict[Path, object], empties: set[Path] | None = None
) -> None:
    """Add `mapping`'s leaves to `out` under `prefix`; with `empties`, also collect the
    paths of its empty sub-mappings there (else they are dropped)."""
    if isinstance(mapping, State):
        for path, leaf in mapping._flat.items():
            out[prefix + path] = leaf
        if empties is not None and mapping._empties:
            empties.update(prefix + path for path in mapping._own_empties())
        return
    for key, value in mapping.items():
        if isinstance(value, Mapping) and not isinstance(value, Variable):
            if empties is not None and not value:
                empties.add((*prefix, key))
            else:
                _flatten_nested(value, (*prefix, key), out, empties)
        else:
            out[(*prefix, key)] = value


def _as_flat(state: State | Mapping) -> dict[Path, object]:
    if isinstance(state, State):
        return state._flat
    flat: dict[Path, object] = {}
    _flatten_nested(state, (), flat)
    return flat


def check_catch_all_last(filters: tuple[Filter, ...]) -> None:
    """Refuse `...`/`True` before the last filter (as Flax NNX 0.12): later ones match nothing."""
    for index, filter_ in enumerate(filters[:-1]):
        if filter_ is ... or filter_ is True:
            raise ValueError(
                "`...` or `True` can only be used as the last filters: "
                f"`{filter_!r}` matches everything, so the filters after it would get nothing; "
                f"got it at index {index} of {len(filters)} filters. Move it to the end (e.g. "
                "`split(model, Param, ...)`)."
            )


def group_flat(
    flat: Mapping[Path, object], filters: tuple[Filter, ...], *, require_all: bool
) -> tuple[State, ...]:
    """Group `flat` by the first matching filter (seed 000); `require_all` as `split` does."""
    check_catch_all_last(filters)
    predicates = filters_to_predicates(filters)
    groups: list[dict[Path, object]] = [{} for _ in predicates]
    for path, leaf in flat.items():
        for group, predicate in zip(groups, predicates, strict=True):
            if predicate(path, leaf):
                group[path] = leaf
                break
        else:
            if require_all:
                raise ValueError(
                    f"No filter matched path {path_str(path)} (path = {path!r}), value = "
                    f"{leaf!r}. Non-exhaustive filters, got a non-empty remainder: the "
                    f"filters were {list(predicates)}; add a filter that matches it, or end "
                    "the list with `...` to catch the rest."
                )
    return tuple(State._from_flat(group) for group in groups)


# A State flattens in sorted path order (each level's keys sorted, as Flax NNX 0.12's nested
# States and JAX's dicts do), so two States with the same paths have the same treedef
# whatever order their paths were inserted in: `jax.tree.map(f, grads, params)` lines
# leaves up by path. The sort runs once per distinct path tuple (cached below), and so does
# the layout of the children: a treedef that nests the sorted leaves into plain dicts under
# the top keys, so that building and reading the children runs in JAX's C++.
_ORDER_CACHE: dict[_Paths, tuple[_Paths, tuple[int, ...] | None]] = {}
_ORDER_CACHE_SIZE = 4096


def _key_rank(key: object) -> tuple[int, object]:
    """A total order over path keys: ints by value, then strings, then anything else by repr."""
    if isinstance(key, int):
        return (0, key)
    if isinstance(key, str):
        return (1, key)
    return (2, f"{type(key).__qualname__}:{key!r}")


def _path_rank(path: Path) -> tuple[tuple[int, object], ...]:
    return tuple(_key_rank(key) for key in path)


def sorted_paths(paths: Iterable[Path]) -> list[Path]:
    """`paths` in the order a State flattens them (each level's keys sorted, ints first)."""
    return sorted(paths, key=_path_rank)


def _sorted_order(paths: _Paths) -> tuple[_Paths, tuple[int, ...] | None]:
    """`paths` in sorted order and the permutation to it (None: already sorted)."""
    entry = _ORDER_CACHE.get(paths)
    if entry is None:
        ranks = [_path_rank(path) for path in paths.paths]
        order = sorted(range(len(ranks)), key=ranks.__getitem__)
        empties = tuple(sorted_paths(paths.empties))
        if order == list(range(len(order))) and empties == paths.empties:
            entry = (paths, None)
        else:
            in_order = tuple(paths.paths[i] for i in order)
            entry = (_Paths(in_order, empties), tuple(order))
        if len(_ORDER_CACHE) >= _ORDER_CACHE_SIZE:
            _ORDER_CACHE.clear()
        _ORDER_CACHE[paths] = entry
    return entry


class _Layout:
    """How a State's sorted paths nest into its pytree children: `keys`, the top keys in
    order, and `treedef`, the list of children (a leaf, or plain dicts of the leaves
    below) with the leaves in sorted path order. `treedef` is None when a level below the
    top mixes key types JAX cannot sort (ints and strings): then the children are the
    leaves themselves, keyed by their whole paths."""

    __slots__ = ("keys", "treedef")

    def __init__(self, keys: tuple[Key, ...], treedef: PyTreeDef | None) -> None:
        self.keys = keys
        self.treedef = treedef

    @staticmethod
    def of(paths: _Paths) -> _Layout:
        nested: dict[Key, _Any] = {}
        for path, placeholder in (
            *((path, 0) for path in paths.paths),
            *((path, {}) for path in paths.empties),
        ):
            level = nested
            for key in path[:-1]:
                level = level.setdefault(key, {})
            level.setdefault(path[-1], placeholder)
        keys = tuple(sorted(nested, key=_key_rank))
        try:
            treedef = jax.tree.structure([nested[key] for key in keys])
        except (TypeError, ValueError):  # a level mixing ints and strings: JAX cannot sort it
            return _Layout(keys, None)
        return _Layout(keys, treedef)


def _state_flatten_with_keys(state: State) -> tuple[list, _Paths]:
    children, paths = _state_flatten(state)
    layout = paths.layout()
    keys = paths.paths if layout.treedef is None else layout.keys  # whole paths, or top keys
    return [(DictKey(key), child) for key, child in zip(keys, children, strict=True)], paths


def _state_flatten(state: State) -> tuple[list, _Paths]:
    leaves, paths = _sorted_leaves(state)
    layout = paths.layout()
    if layout.treedef is None:
        return leaves, paths
    return layout.treedef.unflatten(leaves), paths


def _sorted_leaves(state: State) -> tuple[list, _Paths]:
    flat = state._flat
    empties = tuple(state._own_empties()) if state._empties else ()
    paths, order = _sorted_order(_Paths(tuple(flat), empties))
    leaves = list(flat.values())
    if order is None:
        return leaves, paths
    return [leaves[i] for i in order], paths


def _state_unflatten(paths: _Paths, children: Iterable[object]) -> State:
    layout = paths.layout()
    if layout.treedef is None:
        leaves = children
    else:
        leaves = layout.treedef.flatten_up_to(list(children))
    empties = set(paths.empties) if paths.empties else None
    return State._from_flat(dict(zip(paths.paths, leaves, strict=True)), empties)


register_pytree_with_keys(State, _state_flatten_with_keys, _state_unflatten, _state_flatten)

# A State is also a graph node (as in Flax NNX 0.12): `clone`, `split`, `state` take one ---


def state_flatten(state: State) -> tuple[list[tuple[Key, object]], None]:
    """A State's children: per top key, its leaf or its sub-State."""
    return [(key, state[key]) for key in state._top_keys()], None


def state_unflatten(cls: type, aux: object, children: list[tuple[Key, object]]) -> State:
    """A State from its children (leaves and sub-States)."""
    flat: dict[Path, object] = {}
    empties: set[Path] = set()
    for key, child in children:
        if isinstance(child, State):
            flat.update(((key, *path), leaf) for path, leaf in child._flat.items())
            own = child._own_empties()
            empties.update((key, *path) for path in own)
            if not own and not child._flat:
                empties.add((key,))
        else:
            flat[(key,)] = child
    return cls._from_flat(flat, empties)


def _state_set_key(state: object, key: Key, child: object) -> None:
    state[key] = child  # type: ignore[index]  # a State (the node type it is for)


def _no_static_keys(state: object) -> frozenset:
    return frozenset()  # every child of a State is state: none is static


def state_node_type() -> NodeType:
    """The NodeType of `State` (immutable: `update` writes leaves into it in place)."""
    return NodeType(
        State,
        flatten=state_flatten,
        unflatten=state_unflatten,
        set_key=_state_set_key,
        static_keys=_no_static_keys,
    )


# Flax NNX's module-level State functions ----------------------------------------------------


class FlatState(list[tuple[Path, _Any]]):
    """A State as a list of `(path, leaf)` pairs, in the State's order (Flax's
    `FlatState`): a plain list that also reads its `paths` and `leaves` apart.

    >>> flat = FlatState([(("a",), 1), (("b", "c"), 2)])
    >>> flat.paths, flat.leaves
    ((('a',), ('b', 'c')), [1, 2])
    """

    __slots__ = ()

    @staticmethod
    def from_sorted_keys_values(paths: Iterable[Path], leaves: Iterable[_Any], /) -> FlatState:
        """The FlatState pairing `paths` with `leaves` (equally many, in that order)."""
        return FlatState(zip(paths, leaves, strict=True))

    @property
    def paths(self) -> tuple[Path, ...]:
        """The paths, in order."""
        return tuple(path for path, _ in self)

    @property
    def leaves(self) -> list[_Any]:
        """The leaves, in order."""
        return [leaf for _, leaf in self]

    def to_nested_state(self) -> State:
        """The State of these pairs."""
        return State.from_flat_path(self)

    def flat_state(self) -> dict[Path, _Any]:
        """The pairs as a `{path: leaf}` dict: the older `State.flat_state()` spelling
        (seed 000's `graph.flatten(node)[1].flat_state().items()`)."""
        return dict(self)

    @overload
    def filter(self, first: Filter, /) -> FlatState: ...
    @overload
    def filter(
        self, first: Filter, second: Filter, /, *filters: Filter
    ) -> tuple[FlatState, ...]: ...
    def filter(self, first: Filter, /, *filters: Filter) -> FlatState | tuple[FlatState, ...]:
        """The pairs matching each filter (`State.filter`), one FlatState per filter."""
        found = self.to_nested_state().filter(first, *filters)
        return _flat_states(found)

    @overload
    def split(self, first: Filter, /) -> FlatState: ...
    @overload
    def split(
        self, first: Filter, second: Filter, /, *filters: Filter
    ) -> tuple[FlatState, ...]: ...
    def split(self, first: Filter, /, *filters: Filter) -> FlatState | tuple[FlatState, ...]:
        """Every pair in the FlatState of the first filter matching it (`State.split`)."""
        return _flat_states(self.to_nested_state().split(first, *filters))


def _flat_state_flatten(flat: FlatState) -> tuple[list, _Paths]:
    return [leaf for _, leaf in flat], _Paths(tuple(path for path, _ in flat))


def _flat_state_flatten_with_keys(flat: FlatState) -> tuple[list, _Paths]:
    return [(DictKey(path), leaf) for path, leaf in flat], _Paths(tuple(path for path, _ in flat))


def _flat_state_unflatten(paths: _Paths, leaves: Iterable[object]) -> FlatState:
    return FlatState(zip(paths.paths, leaves, strict=True))


# A FlatState is a pytree over its leaves, in its own order (as Flax's): `jax.tree.leaves`,
# `jax.tree.map` and `jax.jit` see the leaves, and the paths are static.
register_pytree_with_keys(
    FlatState, _flat_state_flatten_with_keys, _flat_state_unflatten, _flat_state_flatten
)


def _flat_states(states: State | tuple[State, ...]) -> FlatState | tuple[FlatState, ...]:
    if isinstance(states, State):
        return FlatState(states._flat.items())
    return tuple(FlatState(state._flat.items()) for state in states)


def to_flat_state(state: State) -> FlatState:
    """The `(path, leaf)` pairs of `state`, in its order, as a `FlatState` (a list).

    >>> to_flat_state(State({"a": {"b": 1}, "c": 2}))
    [(('a', 'b'), 1), (('c',), 2)]
    """
    return FlatState(_as_state(state, "to_flat_state")._flat.items())


def from_flat_state(flat: Mapping[Path, object] | Iterable[tuple[Path, object]]) -> State:
    """The State of `(path, leaf)` pairs (a dict, a list, or `to_flat_state`'s result)."""
    return State.from_flat_path(flat)


def filter_state(state: State, first: Filter, /, *filters: Filter) -> State | tuple[State, ...]:
    """`state.filter(first, *filters)`: the sub-States matching each filter."""
    return _as_state(state, "filter_state").filter(first, *filters)


def split_state(state: State, first: Filter, /, *filters: Filter) -> State | tuple[State, ...]:
    """`state.split(first, *filters)`: every leaf grouped by the first filter matching it."""
    return _as_state(state, "split_state").split(first, *filters)


def to_pure_dict(state: State, extract_fn: Callable[[_Any], _Any] | None = None) -> dict:
    """Nested plain dicts of `state`'s values (`extract_fn(leaf)` when given).

    >>> from bryo_graph import Param
    >>> to_pure_dict(State({"w": Param(1.0)}))
    {'w': 1.0}
    """
    state = _as_state(state, "to_pure_dict")
    if extract_fn is None:
        extract_fn = lambda leaf: leaf.value if isinstance(leaf, Variable) else leaf
    pure = unflatten_paths({path: extract_fn(leaf) for path, leaf in state._flat.items()})
    return cast(dict, pure)  # without a treedef: nested dicts


def restore_int_paths(pure_dict: Mapping) -> dict:
    """`pure_dict` with keys that spell integers (`'0'`, as checkpoints store list
    indices) turned back into integers, at every level."""
    return {
        _int_key(key): restore_int_paths(value) if isinstance(value, Mapping) else value
        for key, value in pure_dict.items()
    }


def replace_by_pure_dict(
    state: State, pure_dict: Mapping, replace_fn: Callable[[_Any, _Any], _Any] | None = None
) -> None:
    """Write the values of nested plain dicts into `state`, in place (Flax 0.12).

    Each leaf at a path of `pure_dict` becomes `leaf.replace(value)` (a Variable keeps its
    type and metadata) or `replace_fn(leaf, value)`; string keys that spell integers also
    match integer keys (checkpoints store list indices as strings).

    Raises:
        ValueError: a path of `pure_dict` that `state` does not have; the message names it.
    """
    state = _as_state(state, "replace_by_pure_dict")
    prefix = state._prefix
    for path, leaf in _pure_dict_updates(state, pure_dict, replace_fn).items():
        state._root[prefix + path] = leaf


def _pure_dict_updates(
    state: State, pure_dict: Mapping, replace_fn: Callable[[_Any, _Any], _Any] | None
) -> dict[Path, object]:
    """The new leaf of `state` at each path of `pure_dict` (checked before any is made)."""
    flat = state._flat
    flat_pure: dict[Path, object] = {}
    _flatten_nested(pure_dict, (), flat_pure)
    matches: dict[Path, Path] = {}
    for path in flat_pure:
        match = path if path in flat else tuple(_int_key(key) for key in path)
        if match not in flat:
            raise ValueError(
                f"key in pure_dict not available in state: {path_str(path)} (the State's paths "
                f"include {', '.join(map(path_str, list(flat)[:5]))}). Build `pure_dict` with "
                "`to_pure_dict` of a State of the same model."
            )
        matches[path] = match
    if replace_fn is None:
        replace_fn = lambda leaf, value: (
            leaf.replace(value) if isinstance(leaf, Variable) else value
        )
    return {match: replace_fn(flat[match], flat_pure[path]) for path, match in matches.items()}


def _int_key(key: object) -> object:
    if isinstance(key, str) and key.lstrip("-").isdigit():
        return int(key)
    return key


def _as_state(state: object, function: str) -> State:
    if not isinstance(state, State):
        raise TypeError(
            f"`{function}` takes a State (from `nnx.state(model)` or `nnx.split`); got "
            f"{type(state).__name__}."
        )
    return state
