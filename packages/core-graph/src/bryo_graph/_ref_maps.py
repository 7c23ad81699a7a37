"""`flatten`/`unflatten` with Flax NNX's index maps: one numbering over several calls.

`flatten(node, ref_index=RefMap())` records in the map every graph node, Variable and raw
array ref it numbered, with the index the GraphDef gives it; a later `flatten` with the
same map gives a node the map holds as a reference (a `RefEntry`, nothing in the State),
so the GraphDefs of several flattenings share one numbering. `unflatten(graphdef, state,
index_ref=IndexMap())` records the objects it built by index, and a later `unflatten` with
the same map resolves a reference to the object an earlier one built.

`ref_outer_index=` and `outer_index_outer_ref=` carry identity across a function boundary
(what `update_context` does with less to pass around): inside, `flatten` numbers the
objects that stand for outer ones (`RefMap.from_indexmap` of the inner `unflatten`'s
`index_ref`) with the outer indices; outside, `unflatten` with the outer `IndexMap` reuses
the object at each such index, updated in place. Unlike Flax, which keeps both numbers in
its NodeDefs, bryo's GraphDef then holds the outer indices only, and `ref_index` maps to
those.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any as _Any

from ._entries import RefEntry
from ._graph import GraphDef
from ._graph import flatten as _flatten
from ._graph import unflatten as _unflatten
from ._modes import graph_mode
from ._state import FlatState, State
from ._tree_mode import TreeDef
from ._update_context import (
    build_numbered,
    flatten_numbered,
    map_indices,
    outer_numbers,
    ref_outputs,
)


class RefMap(MutableMapping[object, int]):
    """A mapping from objects, by identity, to indices (Flax NNX's `nnx.graphlib.RefMap`):
    what `flatten(..., ref_index=)` fills. It keeps its keys alive."""

    __slots__ = ("_mapping",)

    def __init__(self, mapping: Mapping[object, int] | Iterable[tuple[object, int]] = (), /):
        self._mapping: dict[int, tuple[object, int]] = {}
        self.update(mapping)

    @staticmethod
    def from_indexmap(indexmap: Mapping[int, object]) -> RefMap:
        """The `RefMap` of an `IndexMap`: each object to its index."""
        return RefMap((obj, index) for index, obj in indexmap.items())

    def __getitem__(self, key: object) -> int:
        return self._mapping[id(key)][1]

    def __setitem__(self, key: object, value: int) -> None:
        self._mapping[id(key)] = (key, value)

    def __delitem__(self, key: object) -> None:
        del self._mapping[id(key)]

    def __contains__(self, key: object) -> bool:
        return id(key) in self._mapping

    def __iter__(self) -> Iterator[object]:
        return (key for key, _ in self._mapping.values())

    def __len__(self) -> int:
        return len(self._mapping)

    def __repr__(self) -> str:
        items = ", ".join(f"{type(key).__name__}: {index}" for key, index in self.items())
        return f"RefMap({{{items}}})"


class IndexMap(dict[int, object]):
    """A mapping from indices to objects (Flax NNX's `nnx.graphlib.IndexMap`): what
    `unflatten(..., index_ref=)` fills."""

    @staticmethod
    def from_refmap(refmap: RefMap) -> IndexMap:
        """The `IndexMap` of a `RefMap`: each index to its object."""
        return IndexMap((index, obj) for obj, index in refmap.items())


def flatten(
    node: object,
    /,
    *,
    with_paths: bool = True,
    ref_index: RefMap | None = None,
    ref_outer_index: RefMap | None = None,
    graph: bool | None = None,
) -> tuple[GraphDef | TreeDef, FlatState | list]:
    """`node`'s GraphDef and its State leaves as a `FlatState` of `(path, leaf)` pairs
    (Flax NNX's `nnx.flatten`), or as a bare list of leaves with `with_paths=False`.

    The leaves are the live Variables (and raw array leaves), in the order `unflatten`
    takes them back. `graph=False` flattens in tree mode (a `TreeDef`), the leaves in
    sorted path order as Flax's (a namedtuple's or dataclass's fields sorted by name).

    `ref_index`, a `RefMap`, shares one numbering between flattenings: it receives each
    node, Variable and raw array ref numbered, and what it already holds becomes a
    reference. `ref_outer_index` (a `RefMap` of the objects standing for outer ones, by
    outer index) numbers those with their outer indices and the rest past them, for an
    `unflatten(..., outer_index_outer_ref=)` outside; see this module's docstring.
    """
    if ref_index is None and ref_outer_index is None:
        return _flatten(node, with_paths=with_paths, graph=graph)
    _check_ref_map(ref_index, "ref_index")
    _check_ref_map(ref_outer_index, "ref_outer_index")
    if not graph_mode(graph):
        raise ValueError(
            "`ref_index`/`ref_outer_index` number shared nodes across `flatten` calls, and "
            "tree mode (`graph=False`) has no shared nodes: pass `graph=True`, or drop them."
        )
    if ref_index is None:
        ref_index = RefMap()
    graphdef_, flat = _flatten_indexed(node, ref_index, ref_outer_index)
    if with_paths:
        return graphdef_, FlatState(flat.items())
    return graphdef_, list(flat.values())


def _flatten_indexed(
    node: object, ref_index: RefMap, ref_outer_index: RefMap | None
) -> tuple[GraphDef, dict]:
    index = {id(obj): position for obj, position in ref_index.items()}
    held = set(index.values())
    past = max(held, default=-1) + 1
    # new positions are `len(index)`: fill the gaps, so that they come past every held one
    index.update((~position, position) for position in range(past) if position not in held)
    start = len(index)
    alive: dict[int, object] = {}
    root, flat = flatten_numbered(node, index, alive, "flatten")
    added = list(index.items())[start:]
    numbers = {position: position for position in held}
    if ref_outer_index is not None:
        outer = {id(obj): position for obj, position in ref_outer_index.items()}
        fresh = max((*outer.values(), *held), default=-1) + 1
        outer_numbers(added, outer, numbers, fresh)
        root = map_indices(root, numbers)
        flat = ref_outputs(flat, outer)
    else:
        numbers.update((position, position) for _, position in added)
    for key, position in added:
        if key >= 0:  # numbered by id (a plain container is numbered by position only)
            ref_index[alive[key]] = numbers[position]
    return GraphDef(root), flat


def _check_ref_map(value: object, name: str) -> None:
    if value is not None and not isinstance(value, RefMap):
        raise TypeError(
            f"`{name}` must be an `nnx.graphlib.RefMap` (objects keyed by identity, as "
            f"`flatten` fills it); got {type(value).__name__}. Pass `RefMap()`, or "
            "`RefMap.from_indexmap(index_map)` for the objects an `unflatten` built."
        )


def unflatten(
    graphdef: GraphDef | TreeDef,
    state: State | Mapping | FlatState | list | object,
    /,
    *,
    index_ref: dict[int, object] | None = None,
    outer_index_outer_ref: Mapping[int, object] | None = None,
    recreate_variables: bool = True,
) -> _Any:
    """Build a new graph from `graphdef` and a State that fits it exactly; the Variables
    in the State become the new graph's (a bare Variable or array is its own State).

    `state` may also be what `flatten` returned: a `FlatState`, or the bare list of
    leaves (`with_paths=False`) in the GraphDef's order. `recreate_variables=False` puts a
    raw value where the GraphDef has a Variable as it is (Flax's `merge(...,
    recreate_variables=False)`).

    `index_ref`, an `IndexMap`, receives the objects built, by index, and resolves the
    references of a GraphDef that a `flatten` sharing its `ref_index` made to objects an
    earlier `unflatten` built. With `outer_index_outer_ref` (index -> object, the outer
    `flatten`'s `ref_index` as an `IndexMap`), a node or Variable whose index is in it is
    that object, updated in place; see this module's docstring.
    """
    if index_ref is None and outer_index_outer_ref is None:
        return _unflatten(graphdef, state, recreate_variables=recreate_variables)
    if isinstance(graphdef, TreeDef):
        raise ValueError(
            "`index_ref`/`outer_index_outer_ref` resolve the shared nodes of a graph-mode "
            "GraphDef, and this one is tree mode's (`graph=False`), which has none: drop them."
        )
    if index_ref is not None and not isinstance(index_ref, dict):
        raise TypeError(
            "`index_ref` must be an `nnx.graphlib.IndexMap` (a dict of index -> object, "
            f"which `unflatten` fills); got {type(index_ref).__name__}. Pass `IndexMap()`."
        )
    known = index_ref if index_ref is not None else {}
    root = graphdef.root
    if type(root) is RefEntry and root.index not in known:
        raise ValueError(
            f"the GraphDef is a reference to node #{root.index}, which `index_ref` does not "
            "hold. Pass the `IndexMap` an earlier `unflatten` of the same numbering filled."
        )
    where = "`unflatten(..., outer_index_outer_ref=)`"
    return build_numbered(
        graphdef, state, known, outer_index_outer_ref, where, recreate_variables=recreate_variables
    )
