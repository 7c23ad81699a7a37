"""Update contexts: split and merge across a function boundary, keeping object identity.

A lifted transform built by hand splits its inputs outside (1), merges them inside (2),
splits what the function left inside (3) and merges that outside (4). Inside
`update_context(tag)`, `split_context(tag)` and `merge_context(tag, inner)` do the
bookkeeping that makes (4) give back the *original* objects, updated in place: the outer
split remembers each node and Variable by the index it got; the inner merge remembers
which new object stands for which index; the inner split numbers those objects with the
outer indices (new objects get indices past the outer ones), so the GraphDef itself says
which outer object each of its nodes is; the outer merge reuses the object at each such
index, setting its children (and Variable values) to what the function left.

Within one `split_context` several `split`s share their numbering: a node met by an
earlier `split` becomes a reference (a `RefEntry`, with an empty State), and the
`merge_context` merging them in the same order gives back the same object.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any as _Any
from typing import TypeVar

import jax

from bryo_filters import Filter
from bryo_pytree import Path, is_shaped

from ._build import build_graph
from ._compat import is_ref
from ._entries import Entry, LeafEntry, NodeEntry, RefEntry, VariableEntry
from ._errors import GraphError
from ._graph import _COPIED, GraphDef, _Flattener, _is_leaf, leaves_in_order
from ._nodes import node_types
from ._state import FlatState, State, group_flat
from ._tree_mode import TreeDef, tree_merge
from ._variables import Variable, store

F = TypeVar("F", bound=Callable[..., _Any])


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True, slots=True)
class NoUpdate:
    """The value an inner split gives an array-ref Variable that came from outside: the
    ref is shared, so nothing goes back (no leaves); the outer merge keeps the Variable."""


NO_UPDATE = NoUpdate()


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True, slots=True)
class ArrayRefOutput:
    """The value an inner split gives an array-ref Variable made inside: its array, which
    can leave a trace (a ref cannot); the outer merge puts it in a new ref."""

    value: jax.Array


class _Stacks(threading.local):
    def __init__(self) -> None:
        self.by_tag: dict[Hashable, list[UpdateContext]] = {}


_stacks = _Stacks()


class UpdateContext:
    """The bookkeeping of one `update_context(tag)`: what the outer split and the inner
    merge saw. Opaque: it passes through `jax.jit` as static data, all contexts equal."""

    __slots__ = ("_inner_index", "_inner_objects", "_open", "_outer_index", "_outer_objects", "tag")

    def __init__(self, tag: Hashable) -> None:
        self.tag = tag
        self._open = True
        self._outer_index: dict[int, int] | None = None  # id(outer object) -> index
        self._outer_objects: dict[int, object] | None = None  # index -> outer object
        self._inner_index: dict[int, int] | None = None  # id(inner object) -> outer index
        self._inner_objects: dict[int, object] | None = None  # keeps those ids valid

    def __hash__(self) -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UpdateContext)

    def __repr__(self) -> str:
        return f"UpdateContext(tag={self.tag!r}, open={self._open})"

    def _split_ended(self, index: dict[int, int], objects: dict[int, object]) -> None:
        if self._outer_index is None:  # the outer split (1)
            self._outer_index = index
            self._outer_objects = {index[key]: obj for key, obj in objects.items()}
        else:  # the inner split (3): the inner objects are not needed any more
            self._inner_index = self._inner_objects = None

    def _merge_ended(self, built: dict[int, object], inner: bool) -> None:
        if inner:  # the inner merge (2)
            self._inner_objects = built
            self._inner_index = {id(obj): index for index, obj in built.items()}

    def _close(self) -> None:
        self._open = False
        self._outer_index = self._outer_objects = None
        self._inner_index = self._inner_objects = None


class _UpdateContextManager:
    """What `update_context(tag)` returns: a context manager and a decorator."""

    __slots__ = ("tag",)

    def __init__(self, tag: Hashable) -> None:
        self.tag = tag

    def __enter__(self) -> UpdateContext:
        context = UpdateContext(self.tag)
        _stacks.by_tag.setdefault(self.tag, []).append(context)
        return context

    def __exit__(self, *exc_info: object) -> None:
        stack = _stacks.by_tag.get(self.tag)
        if not stack:
            raise RuntimeError(f"update_context({self.tag!r}) exited twice or on another thread.")
        stack.pop()._close()
        if not stack:
            del _stacks.by_tag[self.tag]

    def __call__(self, function: F) -> F:
        @functools.wraps(function)
        def with_update_context(*args: _Any, **kwargs: _Any) -> _Any:
            with self:
                return function(*args, **kwargs)

        return with_update_context  # type: ignore[return-value]  # same signature


def update_context(tag: Hashable) -> _UpdateContextManager:
    """Open an `UpdateContext` for `tag`: a context manager, or a decorator that opens one
    for each call. Inside it, `split_context(tag)` / `merge_context(tag, inner)` keep
    object identity across a function boundary (see this module's docstring)::

        with update_context("f"):
            with split_context("f") as ctx:
                graphdef, state = ctx.split(model)          # (1) outside
            # inside the function (under jax.jit, say):
            with merge_context("f", inner=True) as ctx:
                inner = ctx.merge(graphdef, state)          # (2)
            inner.count = 1
            with split_context("f") as ctx:
                graphdef, state = ctx.split(inner)          # (3)
            # outside again:
            with merge_context("f", inner=False) as ctx:
                same = ctx.merge(graphdef, state)           # (4): `same is model`
    """
    return _UpdateContextManager(tag)


def current_update_context(tag: Hashable) -> UpdateContext:
    """The innermost open `UpdateContext` of `tag`; a `ValueError` when there is none."""
    stack = _stacks.by_tag.get(tag)
    if not stack:
        open_tags = ", ".join(map(repr, _stacks.by_tag)) or "none"
        raise ValueError(
            f"No update context found for tag {tag!r} (open tags: {open_tags}). Call this "
            f"inside `with nnx.update_context({tag!r}):` (or a function decorated with it)."
        )
    return stack[-1]


def _closed_error(what: str, method: str) -> GraphError:
    return GraphError(
        f"`{what}.{method}` was called after its `with` block ended. Call it inside the "
        f"`with {what.lower().replace('context', '_context')}(...) as ctx:` block."
    )


# Split ------------------------------------------------------------------------------


class SplitContext:
    """What `split_context(tag)` yields: `split`/`flatten` sharing one numbering."""

    __slots__ = ("_alive", "_ctxtag", "_global", "_index", "_next", "_update", "is_inner")

    def __init__(self, ctxtag: Hashable | None, update: UpdateContext | None) -> None:
        self._ctxtag = ctxtag
        self._update = update
        # an inner split (3) numbers the objects the inner merge made with outer indices
        self.is_inner: bool | None = None if update is None else update._outer_index is not None
        self._index: dict[int, int] = {}  # id(object) (or ~position) -> local position
        self._alive: dict[int, object] = {}  # keeps the ids in `_index` valid
        self._global: dict[int, int] | None = {} if self.is_inner else None
        self._next = len(update._outer_index) if self.is_inner and update is not None else 0  # type: ignore[arg-type]  # is_inner: set

    @property
    def ctxtag(self) -> Hashable | None:
        """The update context's tag; gone (an `AttributeError`) once the `with` ended."""
        if self._index is None:
            raise AttributeError("this SplitContext's `with` block ended: it has no ctxtag")
        return self._ctxtag

    def split(self, node: object, /, *filters: Filter) -> tuple[_Any, ...]:
        """`(graphdef, state, ...)` as `split` returns them; a node or Variable an earlier
        `split` of this context met is a reference in the GraphDef, not in the State."""
        graphdef, flat = self._flatten(node, "split")
        if not filters:
            return graphdef, State._from_flat(flat)
        return (graphdef, *group_flat(flat, filters, require_all=True))

    def flatten(
        self, node: object, /, *, with_paths: bool = True
    ) -> tuple[GraphDef, FlatState | list]:
        """`(graphdef, flat_state)` as `flatten` returns them, numbered as `split` does."""
        graphdef, flat = self._flatten(node, "flatten")
        if with_paths:
            return graphdef, FlatState(flat.items())
        return graphdef, list(flat.values())

    def _flatten(self, node: object, method: str) -> tuple[GraphDef, dict[Path, object]]:
        if self._index is None:
            raise _closed_error("SplitContext", method)
        start = len(self._index)
        root, flat = flatten_numbered(node, self._index, self._alive, f"SplitContext.{method}")
        if self._global is not None:
            update = self._update
            outer = update._inner_index if update is not None else None
            added = list(self._index.items())[start:]
            self._next = outer_numbers(added, outer, self._global, self._next)
            root = map_indices(root, self._global)
            flat = ref_outputs(flat, outer)
        return GraphDef(root), flat

    def _end(self) -> None:
        if self._update is not None:
            objects = {key: self._alive[key] for key in self._index if key >= 0}
            self._update._split_ended(dict(self._index), objects)
        self._index = None  # type: ignore[assignment]  # closed
        self._alive = {}


def flatten_numbered(
    node: object, index: dict[int, int], alive: dict[int, object], caller: str
) -> tuple[Entry, dict[Path, object]]:
    """`node`'s root entry and State leaves, numbered on from `index` (`id(object)`, or
    `~position` for a plain container, -> position), which receives the new positions: a
    node or Variable already in it is a reference (`RefEntry`, no leaves). `alive`
    receives the objects numbered by id, keeping those ids valid."""
    flattener = _Flattener()
    flattener.index = index
    node_type = flattener.registry.lookup(type(node))
    shared = node_type is None or node_type.type not in _COPIED
    if shared and id(node) in index and (isinstance(node, Variable) or node_type is not None):
        return RefEntry(index[id(node)]), {}
    if node_type is not None:
        root = flattener.flatten(node, node_type)
        flat = {
            path: source.snapshot()
            for path, source in zip(flattener.paths, flattener.sources, strict=True)
        }
        for walked in flattener.walked:
            alive.setdefault(id(walked), walked)
        for source in flattener.sources:  # Variables and raw refs: numbered by id
            kept = source.variable if source.variable is not None else source.value
            if id(kept) in index:
                alive.setdefault(id(kept), kept)
        return root, flat
    if isinstance(node, Variable):
        index[id(node)] = position = len(index)
        alive[id(node)] = node
        return VariableEntry(type(node), position), {(): node}
    if is_shaped(node) or _is_leaf(node):
        return LeafEntry(Variable), {(): node}
    raise GraphError(
        f"`{caller}` takes a graph node or a leaf; got {type(node).__name__}: {node!r:.80}."
    )


def outer_numbers(
    added: Sequence[tuple[int, int]],
    outer: dict[int, int] | None,
    mapping: dict[int, int],
    fresh: int,
) -> int:
    """Give each new `(key, position)` of a flattening its outer index in `mapping`: the
    index `outer` (`id(object)` -> outer index) has for it, or a fresh one counted from
    `fresh` (returned, advanced) for an object made inside or a plain container."""
    for key, position in added:
        found = outer.get(key) if outer is not None and key >= 0 else None
        if found is None:
            found, fresh = fresh, fresh + 1
        mapping[position] = found
    return fresh


def ref_outputs(flat: dict[Path, object], outer: dict[int, int] | None) -> dict[Path, object]:
    """An inner flattening's array-ref Variables: `NoUpdate` for those from outside (in
    `outer`, by id), `ArrayRefOutput` for those made inside (their refs cannot leave)."""
    out = {}
    for path, leaf in flat.items():
        if isinstance(leaf, Variable) and is_ref(leaf.raw_value):
            from_outside = outer is not None and id(leaf) in outer
            raw = NO_UPDATE if from_outside else ArrayRefOutput(leaf.raw_value[...])  # type: ignore[index]  # a ref
            leaf = _holding(leaf, raw)
        out[path] = leaf
    return out


def map_indices(root: Entry, mapping: dict[int, int]) -> Entry:
    """`root` with every node, Variable and reference index `i` made `mapping[i]` (an
    iterative walk: graphs of any depth)."""
    if type(root) is not NodeEntry:
        return _map_leaf(root, mapping)
    # frames: (entry, its remaining children, the (key, new child) pairs made so far)
    stack: list[tuple[NodeEntry, Iterator, list]] = [(root, iter(root.children), [])]
    while True:
        entry, children, done = stack[-1]
        for key, child in children:
            if type(child) is NodeEntry:
                done.append(key)  # replaced by (key, new child) when the child closes
                stack.append((child, iter(child.children), []))
                break
            done.append((key, _map_leaf(child, mapping)))
        else:
            stack.pop()
            new = NodeEntry(entry.type, mapping[entry.index], entry.aux, tuple(done))
            if not stack:
                return new
            parent_done = stack[-1][2]
            parent_done.append((parent_done.pop(), new))


def _map_leaf(entry: Entry, mapping: dict[int, int]) -> Entry:
    if type(entry) is VariableEntry:
        return VariableEntry(entry.type, mapping[entry.index])
    if type(entry) is RefEntry:
        return RefEntry(mapping[entry.index])
    if type(entry) is LeafEntry and entry.index is not None:  # a raw ref
        return LeafEntry(entry.type, mapping[entry.index])
    return entry


@contextmanager
def split_context(ctxtag: Hashable | None = None) -> Iterator[SplitContext]:
    """A `SplitContext` whose `split`s share one numbering; with `ctxtag`, the split (1) or
    (3) of the open `update_context(ctxtag)`."""
    update = current_update_context(ctxtag) if ctxtag is not None else None
    context = SplitContext(ctxtag, update)
    try:
        yield context
    finally:
        context._end()


# Merge ------------------------------------------------------------------------------


class MergeContext:
    """What `merge_context(tag, inner)` yields: `merge`/`unflatten` sharing the objects
    built so far, so that references between the GraphDefs of one `split_context` hold."""

    __slots__ = ("_built", "_ctxtag", "_update", "is_inner")

    def __init__(self, ctxtag: Hashable | None, update: UpdateContext | None, inner: bool | None):
        self._ctxtag = ctxtag
        self.is_inner = inner
        self._update = update
        self._built: dict[int, object] | None = {}

    @property
    def ctxtag(self) -> Hashable | None:
        """The update context's tag; gone (an `AttributeError`) once the `with` ended."""
        if self._built is None:
            raise AttributeError("this MergeContext's `with` block ended: it has no ctxtag")
        return self._ctxtag

    def merge(self, graphdef: GraphDef | TreeDef, state: _Any, /, *states: _Any) -> _Any:
        """The graph of `graphdef` and its States, as `merge` builds it; in the outer merge
        (4) the objects the outer split met are reused and updated in place."""
        if states:
            state = State.merge(state, *states)
        return self._unflatten(graphdef, state, "merge")

    def unflatten(self, graphdef: GraphDef | TreeDef, state: _Any, /) -> _Any:
        """The graph of `graphdef` and what `SplitContext.flatten` returned."""
        return self._unflatten(graphdef, state, "unflatten")

    def _unflatten(self, graphdef: GraphDef | TreeDef, state: _Any, method: str) -> _Any:
        built = self._built
        if built is None:
            raise _closed_error("MergeContext", method)
        if isinstance(graphdef, TreeDef):
            return tree_merge(graphdef, (state,), copy=False, recreate_variables=True)
        if not isinstance(graphdef, GraphDef):
            raise TypeError(
                f"`MergeContext.{method}` takes the GraphDef a `SplitContext` returned first; "
                f"got {type(graphdef).__name__}."
            )
        root = graphdef.root
        if type(root) is RefEntry and root.index not in built:
            raise GraphError(
                f"the GraphDef refers to node #{root.index}, which no earlier `merge` of this "
                "MergeContext built. Merge the GraphDefs of one `split_context` in one "
                "`merge_context`, in the order they were split."
            )
        reuse = self._reuse()
        where = f"the outer merge of update_context({self._ctxtag!r})"
        return build_numbered(graphdef, state, built, reuse, where)

    def _reuse(self) -> dict[int, object] | None:
        update = self._update
        if update is None or self.is_inner is not False:
            return None
        return update._outer_objects

    def _end(self) -> None:
        if self._update is not None and self.is_inner is not None and self._built is not None:
            self._update._merge_ended(self._built, self.is_inner)
        self._built = None


def build_numbered(
    graphdef: GraphDef,
    state: _Any,
    known: dict[int, object],
    reuse: Mapping[int, object] | None,
    where: str,
    *,
    recreate_variables: bool = True,
) -> _Any:
    """The graph of `graphdef` and `state`, resolving references through `known` (index
    -> object built so far, which receives this build's); a node or Variable whose index
    is in `reuse` is that live object, updated in place (checked first: `where` names the
    merge in the error)."""
    root = graphdef.root
    leaves = leaves_in_order(graphdef, state) if type(root) is not RefEntry else []
    if reuse is not None:
        _check_reusable(root, reuse, where)
        leaves = _resolve_ref_outputs(root, leaves, reuse)
    registry = node_types()
    built = build_graph(
        root, leaves, registry, recreate_variables=recreate_variables, known=known, reuse=reuse
    )
    return built.root


def _holding(variable: Variable, raw: object) -> Variable:
    """A new Variable of `variable`'s class and metadata holding `raw` as it is."""
    new = object.__new__(type(variable))
    store(new, raw, variable._metadata)
    return new


def _leaf_entries(root: Entry) -> list[Entry]:
    """The Variable and leaf entries under `root`, in the order of its State leaves."""
    found: list[Entry] = []
    stack = [root]
    while stack:
        entry = stack.pop()
        if type(entry) is VariableEntry or type(entry) is LeafEntry:
            found.append(entry)
        elif type(entry) is NodeEntry:
            stack.extend(child for _, child in reversed(entry.children))
    return found


def _resolve_ref_outputs(
    root: Entry, leaves: Sequence[object], reuse: Mapping[int, object]
) -> list:
    """The outer merge's leaves with `NoUpdate` made the live Variable it stands for and
    `ArrayRefOutput` a new array-ref Variable (checked before anything is built)."""
    out = list(leaves)
    for position, entry in enumerate(_leaf_entries(root)):
        leaf = out[position]
        raw = leaf.raw_value if isinstance(leaf, Variable) else leaf
        if type(raw) is NoUpdate:
            live = reuse.get(entry.index) if type(entry) is VariableEntry else None
            if live is None:
                raise GraphError(
                    "the outer merge got `NoUpdate` for a Variable the outer split did not "
                    "see. Merge the GraphDef and State the inner split of the same update "
                    "context returned; nothing was changed."
                )
            out[position] = live
        elif type(raw) is ArrayRefOutput:
            kind = leaf if isinstance(leaf, Variable) else Variable(raw.value)
            out[position] = _holding(kind, jax.new_ref(raw.value))
    return out


def _check_reusable(root: Entry, reuse: Mapping[int, object], where: str) -> None:
    """Refuse, before anything is written, a GraphDef whose nodes do not fit the objects
    the outer split gave their indices."""
    stack = [root]
    while stack:
        entry = stack.pop()
        if type(entry) is NodeEntry:
            stack.extend(child for _, child in entry.children)
            live = reuse.get(entry.index)
            if live is None or type(live) is entry.type:
                continue
            found = f"a {entry.type.__name__}"
        elif type(entry) is VariableEntry:
            live = reuse.get(entry.index)
            if live is None or isinstance(live, Variable):
                continue
            found = f"a {entry.type.__name__} Variable"
        else:
            continue
        raise GraphError(
            f"{where} got {found} at index {entry.index}, where the outer split had a "
            f"{type(live).__name__}. Merge the GraphDef the inner split of the same update "
            "context returned; nothing was changed."
        )


@contextmanager
def merge_context(
    ctxtag: Hashable | None = None, inner: bool | None = None
) -> Iterator[MergeContext]:
    """A `MergeContext`; with `ctxtag`, the inner merge (2) (`inner=True`) or the outer
    merge (4) (`inner=False`) of the open `update_context(ctxtag)`."""
    update = current_update_context(ctxtag) if ctxtag is not None else None
    if update is not None and inner is None:
        raise ValueError(
            f"merge_context({ctxtag!r}) needs `inner`: `inner=True` for the merge inside the "
            "function, `inner=False` for the merge outside that updates the original objects."
        )
    context = MergeContext(ctxtag, update, inner)
    try:
        yield context
    finally:
        context._end()
