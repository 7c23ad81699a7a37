"""Graph functions: flatten a module graph into a `GraphDef` and a `State`, and back.

A graph is any nest of registered node types (modules of every backend, dicts, lists,
tuples) holding `Variable`s, raw array leaves and static values, possibly with shared
references and cycles. `flatten` walks it once, depth first, giving each node and
Variable an index: a second reference to either becomes a `ref` in the GraphDef, so
`unflatten` rebuilds the sharing. Every walk is iterative: graphs of any depth split and
merge.

Flattening a graph whose nodes all report their structural changes (or cannot change) is
cached: re-splitting an unchanged model only reads the Variables' current values. The
cache of an `Object` (or `List`, `Dict`) root lives on the root itself, that of an
immutable root in a bounded table that holds the root weakly, so a cache never keeps a
model alive; a cached flattening expires when one of *its* nodes changes (`_tracking`).
`merge` walks the GraphDef (`_build`) and compiles it only once it proved hot (`_compile`),
and hands what it built to the new graph's first flattening, which then need not walk it.

As in Flax NNX 0.12, the States hold the graph's live Variables and raw leaves as they
are (arrays, `data(...)` values; a backend's node type may name a Variable class for its
raw arrays, as Equinox's does: `Param`), `merge` puts the Variables it is given
into the new graph (`copy=True` copies them), `update` adds paths the graph lacks under
existing nodes, and a bare Variable or array is a graph of its own. `graph=False` runs the
functions in tree mode (`_tree_mode`); `set_graph_mode` changes the default.
"""

from __future__ import annotations

import abc
import reprlib
import threading
import types
import weakref
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from typing import Any as _Any
from typing import cast

import jax

from bryo_filters import Filter, filters_to_predicates, is_builtin_filter
from bryo_plugins import PluginError, Stamped, TypeTable
from bryo_pytree import Key, Path, hashable, is_shaped, path_str

from ._build import build_graph, write_variable
from ._caches import clear_registered
from ._calls import MethodCaller, Step, method_of
from ._compat import is_ref
from ._compile import compile_graphdef
from ._entries import (
    Entry,
    LeafEntry,
    NodeEntry,
    RefEntry,
    StaticEntry,
    VariableEntry,
    collect_leaf_paths,
    entries_equal,
    render,
)
from ._errors import GraphError
from ._fields import data_types
from ._graph_state import GraphState, graph_states_parts
from ._modes import graph_mode
from ._nodes import (
    JAX_PYTREE,
    JaxPytree,
    NodeType,
    _tuple_flatten,
    is_pytree_node,
    node_callback_failed,
    node_types,
)
from ._object import MERGED, Dict, List, Object, _dict_flatten, _list_flatten, object_flatten
from ._state import FlatState, State, check_catch_all_last, group_flat, sorted_paths
from ._tracking import GuardedWatch, Watch, watch_all, write_count
from ._tree_mode import TreeDef, tree_flatten, tree_iter, tree_merge, tree_split, tree_state
from ._variables import NO_METADATA, Variable, VariableState, variable_class

# A GraphDef is compiled once it was built this many times (`_compile` costs dozens of
# walks and saves about half of one), and only when its nodes nest at most this deep.
_HOT_BUILDS = 16
_COMPILE_MAX_DEPTH = 100


class GraphDef(abc.ABC):  # noqa: B024  # an ABC only so that TreeDef can be registered below
    """A graph's structure without its state: hashable, structurally comparable.

    The hash is computed once. Two GraphDefs are equal when their graphs have the same
    node types, keys, static values and sharing, whatever the values in their States.
    `root` is the graph's `NodeEntry` (see `bryo_graph.NodeEntry` for the entries).
    Tree mode's `TreeDef` counts as a GraphDef for `isinstance`, as in Flax NNX 0.12.
    """

    __slots__ = (
        "__weakref__",
        "_builder",
        "_builds",
        "_depth",
        "_handover",
        "_hash",
        "_leaf_order",
        "_leaf_paths",
        "_span_table",
        "root",
    )

    def __init__(self, root: Entry) -> None:
        self.root = root
        try:
            self._hash = hash(root)
        except TypeError as error:
            _check_aux(root, error)
            raise
        self._leaf_paths: frozenset[Path] | None = None
        self._leaf_order: tuple[Path, ...] | None = None
        self._builder: Stamped[Callable[[list], tuple[object, _Objects]]] | None = None
        self._builds = 0
        self._depth = 0
        # how `merge` hands its flattening over (`_HandoverPlan`): None until a flattening
        # of a merged graph checked it, False where it cannot be handed over
        self._handover: _HandoverPlan | bool | None = None
        self._span_table: dict[Path, range | None] | None = None

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return (
            type(other) is GraphDef
            and self._hash == other._hash
            and entries_equal(self.root, other.root)
        )

    def __reduce__(self) -> tuple:
        """Copies and pickles keep the entries; the compiled builder is made again."""
        return (GraphDef, (self.root,))

    @property
    def leaf_order(self) -> tuple[Path, ...]:
        """The paths a State must have to merge with this GraphDef, in flattening order."""
        if self._leaf_order is None:
            paths: list[Path] = []
            collect_leaf_paths(self.root, (), paths)
            self._leaf_order = tuple(paths)
        return self._leaf_order

    @property
    def leaf_paths(self) -> frozenset[Path]:
        """The paths a State must have to merge with this GraphDef."""
        if self._leaf_paths is None:
            self._leaf_paths = frozenset(self.leaf_order)
        return self._leaf_paths

    @property
    def nodes(self) -> tuple[NodeEntry | VariableEntry | RefEntry, ...]:
        """The entries of the graph's nodes, Variables and references, depth first: the
        first is the root's (a `RefEntry` when a `SplitContext` met the root before)."""
        found: list[NodeEntry | VariableEntry | RefEntry] = []
        stack = [self.root]
        while stack:
            entry = stack.pop()
            if type(entry) is NodeEntry:
                found.append(entry)
                stack.extend(child for _, child in reversed(entry.children))
            elif type(entry) is VariableEntry or type(entry) is RefEntry:
                found.append(entry)
        return tuple(found)

    def build(self, leaves: list) -> object:
        """A new graph from State leaves given in `leaf_order` (no checks).

        The first builds walk the entries; a GraphDef built `_HOT_BUILDS` times is
        compiled into straight-line Python (unless its nodes nest deeper than
        `_COMPILE_MAX_DEPTH`) and built by that function from then on.
        """
        return self._build(leaves)[0]

    def _build(self, leaves: list) -> tuple[object, _Objects]:
        """`build`, with the nodes and Variables built (or put in) by GraphDef index: a
        tuple or a dict, without the root (see `compile_graphdef`)."""
        registry = node_types()
        builder = self._builder
        if builder is not None and builder.epoch == registry.epoch:
            try:
                return builder.value(leaves)
            except Exception:  # (free until it catches) a backend's function failed:
                build_graph(self.root, leaves, registry)  # the walk names it
                raise
        if self._builds >= _HOT_BUILDS and self._depth <= _COMPILE_MAX_DEPTH:
            function = compile_graphdef(self.root, registry, name=self._name())
            self._builder = Stamped(registry.epoch, function)
            _compiled[id(self)] = self
            try:
                return function(leaves)
            except Exception:
                build_graph(self.root, leaves, registry)
                raise
        built = build_graph(self.root, leaves, registry)
        self._builds += 1
        self._depth = built.depth
        objects = built.built
        if type(self.root) is NodeEntry:
            objects.pop(self.root.index, None)
        return built.root, objects

    def span_table(self) -> dict[Path, range | None]:
        """`path -> range` of each node entry's State leaves (None where its subgraph
        refers to a node or Variable numbered before it): what `FlatGraph.node_spans`
        reads, made once per GraphDef. Never mutate it."""
        table = self._span_table
        if table is None:
            table = self._span_table = _span_table(self.root)
        return table

    def _forget_builder(self) -> None:
        """Drop the compiled builder and the count of builds (`clear_caches`)."""
        self._builder = None
        self._builds = 0
        self._handover = None

    def _name(self) -> str:
        """The file name the compiled builder's tracebacks show."""
        return f"<bryo graphdef {self._hash & 0xFFFFFFFF:08x}>"

    def __repr__(self) -> str:
        return "GraphDef(" + render(self.root) + ")"

    def __class_getitem__(cls, item: object) -> types.GenericAlias:
        """`GraphDef[Model]`: a typing alias (GraphDefs are not generic at runtime)."""
        return types.GenericAlias(cls, item)

    def apply(self, state: State | Mapping | object, /, *states: State | Mapping) -> MethodCaller:
        """Call a method of the graph this GraphDef and `state` describe, purely.

        `graphdef.apply(state)(x)` calls the node, `graphdef.apply(state).encoder.reset()`
        or `graphdef.apply(state)['b'].increment()` a method found by attribute and item
        access; each returns `(output, (graphdef, state))`, the graph as it is after the
        call. The graph runs on copies of the given Variables: `state` is left unchanged.
        """

        def run(steps: tuple[Step, ...], args: tuple, kwargs: dict[str, _Any]) -> tuple:
            node = merge(self, state, *states, copy=True)
            out = method_of(node, steps)(*args, **kwargs)
            return out, split(node, graph=True)

        return MethodCaller(run)


jax.tree_util.register_static(GraphDef)  # a GraphDef passes through `jax.jit` as static data
# `isinstance(treedef, GraphDef)` holds for tree mode's `TreeDef` too: in Flax NNX 0.12 both
# modes' `split` return a `GraphDef`.
GraphDef.register(TreeDef)


# GraphDefs holding a compiled builder, by id, for `clear_caches` (held weakly)
_compiled: weakref.WeakValueDictionary[int, GraphDef] = weakref.WeakValueDictionary()


# Flattening -------------------------------------------------------------------------


_SOURCE_VALUE = object()  # `LeafSource.as_variable`'s default: the source's own value


class LeafSource:
    """Where one State leaf lives in the graph: a Variable, or a raw leaf of a parent.

    Attributes:
        variable: the live Variable, or None for a raw array leaf.
        value: the raw array (None for a Variable: read `variable.raw_value`).
        leaf_type: the Variable class the leaf has in a State.
        parent: the node holding the leaf.
        parent_type: the parent's `NodeType`.
        key: the key of the leaf in its parent (`parent_type.set_key(parent, key, v)`
            writes a raw leaf).
    """

    __slots__ = ("_parent", "key", "leaf_type", "parent_type", "value", "variable")

    def __init__(
        self,
        variable: Variable | None,
        value: object,
        leaf_type: type,
        parent: object,
        parent_type: NodeType | None,
        key: Key,
    ) -> None:
        self.variable = variable
        self.value = value
        self.leaf_type = leaf_type
        self._parent = parent
        self.parent_type = parent_type
        self.key = key

    @property
    def parent(self) -> object:
        """The node holding the leaf (the root of a cached immutable graph is held weakly)."""
        parent = self._parent
        return parent() if type(parent) is weakref.ref else parent

    def snapshot(self) -> object:
        """The State leaf: the live Variable; a raw array as it is (Flax NNX 0.12), or
        in a new `leaf_type` Variable where the parent's node type names one (Equinox
        modules' arrays are Params), with the metadata the parent's node type gives it."""
        variable = self.variable
        if variable is not None:
            return variable
        if self.leaf_type is Variable:
            return self.value
        return self.leaf_type.from_metadata(self.value, self.metadata or NO_METADATA)

    @property
    def metadata(self) -> Mapping[str, object] | None:
        """A raw leaf's metadata from its parent's node type (`NodeType.leaf_metadata`:
        the axis names of a Haliax array in an Equinox model), or None."""
        parent_type = self.parent_type
        if self.variable is not None or parent_type is None or parent_type.leaf_metadata is None:
            return None
        where = f"for its array {self.key!r}"
        try:
            metadata = parent_type.leaf_metadata(self.parent)
        except Exception as error:
            node_callback_failed(parent_type, "leaf_metadata", where, error=error)
        if metadata is None or type(metadata) is dict or isinstance(metadata, Mapping):
            return metadata
        returned = f"{type(metadata).__name__} {reprlib.repr(metadata)}"
        node_callback_failed(parent_type, "leaf_metadata", where, returned=returned)

    def as_variable(self, value: object = _SOURCE_VALUE) -> Variable:
        """The leaf as transforms' filters see it: the live Variable, or a new
        `leaf_type` VariableState holding the raw value (or `value`), with its `metadata`."""
        if self.variable is not None:
            return self.variable
        leaf = VariableState(self.leaf_type, self.value if value is _SOURCE_VALUE else value)
        metadata = self.metadata
        return leaf.copy(**metadata) if metadata else leaf


class FlatGraph:
    """One flattening of a graph: its GraphDef and the sources of its State leaves.

    Attributes:
        graphdef: the graph's `GraphDef`.
        paths: the State leaves' paths, in GraphDef order.
        sources: per State leaf, the `LeafSource` it is read from and written to.

        nodes: `(path, node)` of every mutable node, children first.
        watch: the `Watch` that says whether the flattening is still valid.

    It also remembers how built-in filters grouped its leaves: their answers depend only
    on paths, Variable types and metadata, which cannot change while the flattening is
    valid (metadata changes count as structural).
    """

    __slots__ = ("_groups", "_index", "_spans", "graphdef", "nodes", "paths", "sources", "watch")

    def __init__(
        self,
        graphdef: GraphDef,
        paths: list[Path],
        sources: list[LeafSource],
        nodes: list,
        watch: Watch | None = None,
    ) -> None:
        self.graphdef = graphdef
        self.paths = paths
        self.sources = sources
        self.nodes = nodes
        self.watch = watch
        self._index: dict[Path, LeafSource] | None = None
        self._groups: dict[tuple, tuple[list[int], ...]] = {}
        self._spans: dict[int, tuple[object, range | None]] | None = None

    @property
    def index(self) -> dict[Path, LeafSource]:
        if self._index is None:
            self._index = dict(zip(self.paths, self.sources, strict=True))
        return self._index

    def leaves_of(self, node: object) -> range | None:
        """The positions in `paths`/`sources` of the State leaves of `flat_graph(node)`, for
        a mutable `node` of this graph, in the same order; `None` when `node` is not one of
        this graph's mutable nodes or its own flattening would differ from its part of
        this one (it shares a node or Variable with a part walked before it).

        A node's subgraph is flattened contiguously, so its leaves form one range; tools
        that look at many nested nodes of one model read them from the root's flattening
        instead of flattening each node (`make_mox` does, per module call).
        """
        found = self.node_spans().get(id(node))
        return found[1] if found is not None and found[0] is node else None

    def node_spans(self) -> dict[int, tuple[object, range | None]]:
        """`id(node) -> (node, leaves_of(node))` for every mutable node of this graph, made
        on first use and shared (never mutate it): what a tool needs to answer `leaves_of`
        after dropping this flattening (its GraphDef)."""
        spans = self._spans
        if spans is None:
            table = self.graphdef.span_table()
            spans = self._spans = {id(node): (node, table[path]) for path, node in self.nodes}
        return spans

    def flat_state(self) -> dict[Path, object]:
        return {
            path: source.snapshot() for path, source in zip(self.paths, self.sources, strict=True)
        }

    def grouped(self, filters: tuple[Filter, ...], *, require_all: bool) -> tuple[State, ...]:
        """The leaves grouped by the first matching filter, as `State`s."""
        check_catch_all_last(filters)
        predicates = filters_to_predicates(filters)
        if not all(map(is_builtin_filter, predicates)):
            return group_flat(self.flat_state(), predicates, require_all=require_all)
        groups = self._groups.get(predicates)
        if groups is None:
            groups = self._groups[predicates] = self._classify(predicates)
        if require_all and groups[-1]:
            path = self.paths[groups[-1][0]]
            group_flat({path: self.sources[groups[-1][0]].snapshot()}, predicates, require_all=True)
        paths, sources = self.paths, self.sources
        return tuple(
            State._from_flat({paths[i]: sources[i].snapshot() for i in group})
            for group in groups[:-1]
        )

    def _classify(self, predicates: tuple) -> tuple[list[int], ...]:
        groups: list[list[int]] = [[] for _ in range(len(predicates) + 1)]
        for i, (path, source) in enumerate(zip(self.paths, self.sources, strict=True)):
            value = source.snapshot()
            for group, predicate in zip(groups, predicates, strict=False):
                if predicate(path, value):
                    group.append(i)
                    break
            else:
                groups[-1].append(i)  # matched by no filter
        return tuple(groups)


def _check_aux(root: Entry, error: TypeError) -> None:
    """After hashing the GraphDef `root` failed: raise the error naming the node type whose
    `flatten` gave an unhashable aux (JAX would fail far away, hashing it as a static
    argument), with the node's path; else return."""
    stack: list[tuple[Entry, Path]] = [(root, ())]
    while stack:
        entry, path = stack.pop()
        if type(entry) is not NodeEntry:
            continue
        try:
            hash(entry.aux)
        except TypeError:
            node_type = node_types().lookup(entry.type)
            if node_type is not None:
                returned = f"an unhashable aux {reprlib.repr(entry.aux)} ({error})"
                node_callback_failed(node_type, "flatten", _flattening(path), returned=returned)
        stack.extend((child, (*path, key)) for key, child in entry.children)


def _span_table(root: Entry) -> dict[Path, range | None]:
    """`path -> leaf positions` for the node entries under `root`: the range of each
    node's leaves, or None when its subgraph refers to a node or Variable numbered before
    it (its own flattening would then hold that one's leaves)."""
    spans: dict[Path, range | None] = {}
    # open nodes: [index, path, first leaf position, self-contained]; items to visit are
    # (entry, path), or None to close the innermost open node
    open_nodes: list[list] = []
    stack: list[tuple[Entry, Path] | None] = [(root, ())]
    position = 0
    while stack:
        item = stack.pop()
        if item is None:
            _, path, start, contained = open_nodes.pop()
            spans[path] = range(start, position) if contained else None
            continue
        entry, path = item
        if type(entry) is VariableEntry or type(entry) is LeafEntry:
            position += 1
        elif type(entry) is RefEntry:
            for frame in reversed(open_nodes):  # indices grow inwards
                if frame[0] <= entry.index:
                    break
                frame[3] = False
        elif type(entry) is NodeEntry:
            open_nodes.append([entry.index, path, position, True])
            stack.append(None)
            stack.extend((child, (*path, key)) for key, child in reversed(entry.children))
    return spans


class _Frame:
    """A node of the graph whose children are being flattened."""

    __slots__ = (
        "aux",
        "children",
        "entries",
        "index",
        "key",
        "leaf_type",
        "node",
        "node_type",
        "path",
        "static",
    )

    def __init__(
        self, node: object, node_type: NodeType, index: int, path: Path, key: Key, leaf_type: type
    ) -> None:
        self.node = node
        self.node_type = node_type
        self.index = index
        self.path = path
        self.key = key
        self.leaf_type = node_type.leaf_type or leaf_type  # the leaf type of its children
        try:
            flat = node_type.flatten(node)
        except Exception as error:
            node_callback_failed(node_type, "flatten", _flattening(path), error=error)
        if not (isinstance(flat, tuple) and len(flat) == 2):
            returned = f"{type(flat).__name__} {reprlib.repr(flat)}, not a pair"
            node_callback_failed(node_type, "flatten", _flattening(path), returned=returned)
        children, self.aux = flat
        try:
            self.children = iter(children)
            # the keys of static children, kept whole in the GraphDef (an Object's static
            # attributes); None when the node type does not tell data from static
            self.static = node_type.static_keys(node) if node_type.static_keys else None
        except Exception as error:
            if not _iterable(children):
                returned = f"children {reprlib.repr(children)}, not a list of `(key, child)` pairs"
                node_callback_failed(node_type, "flatten", _flattening(path), returned=returned)
            node_callback_failed(node_type, "static_keys", _flattening(path), error=error)
        self.entries: list[tuple[Key, Entry]] = []


def _flattening(path: Path) -> str:
    return f"while flattening the node at {path_str(path)}"


def _iterable(value: object) -> bool:
    try:
        iter(value)  # type: ignore[call-overload]  # what is checked
    except TypeError:
        return False
    return True


def _check_frame(frame: _Frame, error: Exception) -> None:
    """After `error` broke a walk in `frame`'s children: raise the error naming the node
    type's function if it answered children that are not `(key, child)` pairs or static
    keys that are no container (the walk unpacks and tests them), else return. Called
    only once the walk failed: it asks `flatten` again (it must be pure)."""
    node_type = frame.node_type
    where = _flattening(frame.path)
    if frame.static is not None and not isinstance(frame.static, Container):
        returned = f"{type(frame.static).__name__} {reprlib.repr(frame.static)}"
        node_callback_failed(node_type, "static_keys", where, returned=returned)
    try:
        children = list(node_type.flatten(frame.node)[0])
    except Exception as again:
        if again.__class__ is error.__class__ and str(again) == str(error):
            node_callback_failed(node_type, "flatten", where, error=error)
        return
    for child in children:
        if not (isinstance(child, tuple | list) and len(child) == 2):
            returned = f"a child {reprlib.repr(child)} that is not a `(key, child)` pair"
            node_callback_failed(node_type, "flatten", where, returned=returned)


# Plain containers and the JAX pytrees nodes hold are walked at each occurrence, never
# shared: as in Flax NNX 0.12 (where they are pytrees, not graph nodes), a plain dict met
# twice is two dicts after `merge` (the Variables in it stay shared).
_COPIED = frozenset({dict, list, tuple, JaxPytree})


def _refuse_copied_cycle(node: object, path: Path) -> None:
    raise GraphError(
        f"The plain {type(node).__name__} at {path_str(path)} contains itself. Plain dicts, "
        "lists and tuples are copied at each occurrence (as JAX pytrees are), so they cannot "
        "form cycles: use `nnx.List`/`nnx.Dict` (graph nodes) for a cyclic structure."
    )


class _Flattener:
    """One walk of a graph, depth first and iterative, numbering nodes and Variables."""

    def __init__(self) -> None:
        self.registry = node_types()
        self.index: dict[int, int] = {}
        self.paths: list[Path] = []
        self.sources: list[LeafSource] = []
        self.nodes: list[tuple[Path, object]] = []
        self.tracked: list[object] = []  # what a cached flattening must watch
        # (unchanged, node) of the nodes whose type checks them before a cache hit
        self.guards: list[tuple[Callable[[_Any], bool], object]] = []
        # Every node walked, alive until the walk ends: a node that a backend's `flatten`
        # made on the fly (Equinox's frozen containers) must not free its id for reuse.
        self.walked: list[object] = []
        self.cacheable = True
        self.open_copied: set[int] = set()  # ids of the `_COPIED` nodes being walked

    def flatten(self, root: object, node_type: NodeType) -> NodeEntry:
        stack = [self.open(root, node_type, (), (), Variable)]
        try:
            return self._walk(stack)
        except (GraphError, PluginError):
            raise
        except Exception as error:  # (free until it catches) a backend's children?
            if stack:
                _check_frame(stack[-1], error)
            raise

    def _walk(self, stack: list[_Frame]) -> NodeEntry:
        index, registry, paths, sources = self.index, self.registry, self.paths, self.sources
        while True:
            frame = stack[-1]
            node, parent_type, leaf_type, entries = (
                frame.node,
                frame.node_type,
                frame.leaf_type,
                frame.entries,
            )
            static = frame.static
            for key, child in frame.children:
                # (an abstract array, not data for JAX, is a State leaf all the same)
                if static is not None and key in static and not is_shaped(child):
                    entries.append((key, StaticEntry(hashable(child))))
                    continue
                if isinstance(child, Variable):
                    seen = index.get(id(child))
                    if seen is not None:
                        entries.append((key, RefEntry(seen)))
                        continue
                    index[id(child)] = position = len(index)
                    paths.append((*frame.path, key))
                    cls = variable_class(child)
                    sources.append(LeafSource(child, None, cls, node, parent_type, key))
                    self.tracked.append(child)
                    entries.append((key, VariableEntry(cls, position)))
                    continue
                child_type = registry.lookup(type(child))
                if (
                    child_type is None
                    and static is not None  # data of a node telling data from static
                    and not is_shaped(child)
                    and is_pytree_node(child)
                ):
                    child_type = JAX_PYTREE  # walked as Flax walks pytrees
                if child_type is not None:
                    if child_type.type not in _COPIED:
                        seen = index.get(id(child))
                        if seen is not None:
                            entries.append((key, RefEntry(seen)))
                            continue
                    elif id(child) in self.open_copied:
                        _refuse_copied_cycle(child, (*frame.path, key))
                    path = (*frame.path, key)
                    stack.append(self.open(child, child_type, path, key, leaf_type))
                    break
                # arrays, abstract arrays, a backend's array type; and what a node type
                # that tells data from static did not call static (`data(1)`)
                if static is not None or is_shaped(child):
                    ref_index = None
                    if is_ref(child):  # (or traced) met again: a reference to the first place
                        seen = index.get(id(child))
                        if seen is not None:
                            entries.append((key, RefEntry(seen)))
                            continue
                        index[id(child)] = ref_index = len(index)
                    paths.append((*frame.path, key))
                    sources.append(LeafSource(None, child, leaf_type, node, parent_type, key))
                    entries.append((key, LeafEntry(leaf_type, ref_index)))
                else:
                    entries.append((key, StaticEntry(hashable(child))))
            else:
                stack.pop()
                if parent_type.type in _COPIED:
                    self.open_copied.discard(id(node))
                cls = JaxPytree if parent_type is JAX_PYTREE else type(node)
                entry = NodeEntry(cls, frame.index, frame.aux, tuple(entries))
                if parent_type.mutable:
                    self.nodes.append((frame.path, node))
                if not stack:
                    return entry
                stack[-1].entries.append((frame.key, entry))

    def flatten_leaf(self, leaf: object) -> VariableEntry | LeafEntry:
        """The entry of a graph that is one bare Variable or array (its path is `()`)."""
        self.paths.append(())
        if isinstance(leaf, Variable):
            self.index[id(leaf)] = 0
            cls = variable_class(leaf)
            self.sources.append(LeafSource(leaf, None, cls, None, None, ()))
            return VariableEntry(cls, 0)
        self.sources.append(LeafSource(None, leaf, Variable, None, None, ()))
        return LeafEntry(Variable)

    def open(
        self, node: object, node_type: NodeType, path: Path, key: Key, leaf_type: type
    ) -> _Frame:
        """Number `node` and start walking its children."""
        position = len(self.index)
        if node_type.type in _COPIED:  # numbered, but never found again by its id
            self.index[~position] = position
            self.open_copied.add(id(node))
        else:
            self.index[id(node)] = position
        self.walked.append(node)
        if not node_type.cacheable:
            self.cacheable = False
        elif node_type.tracks_structure:
            self.tracked.append(node)
        elif node_type.unchanged is not None:
            self.guards.append((node_type.unchanged, node))
        return _Frame(node, node_type, position, path, key, leaf_type)


def _is_leaf(value: object) -> bool:
    """Whether `value` is a JAX pytree leaf (a scalar, any unregistered object)."""
    return jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(value)) and value is not None


_CACHE = "_object__flat"  # where an Object (or List, Dict) root keeps its flattening
_OWN_CACHE = (Object, List, Dict)
_TABLE_SIZE = 128


class _TableEntry:
    """A cached flattening of an immutable root, which the table holds weakly."""

    __slots__ = ("flat", "ref")

    def __init__(self, ref: weakref.ref, flat: FlatGraph) -> None:
        self.ref = ref
        self.flat = flat


_table: dict[int, _TableEntry] = {}  # id(root) -> entry, oldest first
_table_lock = threading.Lock()
# Roots holding their own cached flattening, by id, for `clear_caches` (held weakly)
_owners: weakref.WeakValueDictionary[int, object] = weakref.WeakValueDictionary()


def flat_graph(node: object, /, *, keep: bool = True) -> FlatGraph:
    """`node` flattened: its GraphDef and, per State leaf, its path and live source.

    The flattening is reused while none of `node`'s nodes changed: the same `FlatGraph`
    object comes back, so its identity can key caches of work done per structure (the
    lifted transforms' call plans do). Read values through its `sources`; never mutate it.
    With `keep=False` a new flattening is not stored for reuse (an `Object` root storing
    its own would make a reference cycle, which only the garbage collector frees): its
    `watch` still tells whether it is valid. Tools flattening short-lived models (a model
    merged inside a traced function) pass it.

    The first flattening of a graph that `merge` built, when nothing was written since, is
    made from what the merge knew (its GraphDef, the very object `merge` got, and the nodes
    and Variables it built) instead of walking the graph: the same result, for a fraction
    of the cost (see "Handing a merge's flattening over" below).
    """
    own = isinstance(node, _OWN_CACHE)
    merged = None
    if own:
        namespace = node.__dict__
        flat = namespace.get(_CACHE)
        if flat is not None and flat.watch.is_valid():
            return flat
        merged = namespace.pop(MERGED, None)  # (taken by one caller only)
        if merged is not None:
            flat = _handed_over(node, merged, keep)
            if flat is not None:
                return flat
    else:
        entry = _table.get(id(node))
        if entry is not None and entry.ref() is node and entry.flat.watch.is_valid():  # type: ignore[union-attr]  # a cached flattening has a watch
            return entry.flat
    writes = write_count()
    flattener = _Flattener()
    node_type = flattener.registry.lookup(type(node))
    if node_type is None and (isinstance(node, Variable) or is_shaped(node) or _is_leaf(node)):
        root = flattener.flatten_leaf(node)  # a graph of one leaf (Flax: any non-node)
        return FlatGraph(GraphDef(root), flattener.paths, flattener.sources, flattener.nodes)
    if node_type is None:
        raise GraphError(
            f"`node` must be a graph node (a module of a registered backend, a dict, list or "
            f"tuple) or a leaf (a Variable, an array, a scalar); got {type(node).__name__}, a "
            f"JAX pytree that is no graph node: {node!r:.80}. Install or import the backend "
            "that defines it, or pass its leaves."
        )
    root = flattener.flatten(node, node_type)
    flat = FlatGraph(GraphDef(root), flattener.paths, flattener.sources, flattener.nodes)
    if flattener.cacheable and (own or not node_type.mutable):
        _remember(node, flat, flattener, writes, own, keep)
    if merged is not None and writes == merged.writes + 1:  # nothing written since merge
        _check_handover(merged, node, flat, flattener)
    return flat


def _remember(
    node: object, flat: FlatGraph, walk: _Flattener, writes: int, own: bool, keep: bool
) -> None:
    """Watch `flat`'s nodes and, with `keep`, cache it on the root or in the table, if
    nothing changed while it was made."""
    watch = flat.watch = _guarded_watch(node, walk.guards) if walk.guards else Watch()
    if not watch_all(watch, walk.tracked) or write_count() != writes + 1:
        watch.expire()  # a node cannot keep watches, or a write raced the walk
        return
    if not keep:
        return
    if own:
        _keep_own(node, flat)
        return
    key = id(node)
    try:
        ref = weakref.ref(node, lambda ref: _forget_root(key, ref))
    except TypeError:  # tuples and other objects without weak references
        watch.expire()
        return
    for source in flat.sources:  # the table must not keep the root alive
        if source._parent is node:
            source._parent = ref
    with _table_lock:
        while len(_table) >= _TABLE_SIZE:
            oldest = _table.pop(next(iter(_table)), None)
            if oldest is not None:
                oldest.flat.watch.expire()  # type: ignore[union-attr]  # a cached flattening has a watch
        _table[key] = _TableEntry(ref, flat)


def _guarded_watch(root: object, guards: list[tuple[Callable[[_Any], bool], object]]) -> Watch:
    """The watch of a flattening holding nodes that their type checks before a cache hit
    (`NodeType.unchanged`); the root is held weakly (a cached flattening lives on it or in
    the table, which must not keep it alive). A root without weak references gets an
    expired watch: its flattening is never reused."""
    try:
        ref = weakref.ref(root)
    except TypeError:
        watch = Watch()
        watch.expire()
        return watch
    guards = [(check, ref if node is root else node) for check, node in guards]
    return GuardedWatch(guards, _unchanged_failed)


def _unchanged_failed(check: Callable[[_Any], bool], node: object, error: Exception) -> None:
    """Raise the error naming the node type whose `unchanged` check raised `error`."""
    node_type = node_types().lookup(type(node))
    if node_type is not None and node_type.unchanged is check:
        where = f"on a {type(node).__qualname__} of a model bryo flattened before"
        node_callback_failed(node_type, "unchanged", where, error=error)


def _keep_own(node: object, flat: FlatGraph) -> None:
    """Cache `flat` on its root, an `Object`, `List` or `Dict`."""
    node.__dict__[_CACHE] = flat
    _owners[id(node)] = node


def _forget_root(key: int, ref: weakref.ref) -> None:
    """The weak reference callback of a table entry: its root is gone. (No lock: it may
    run in the middle of any code, and the root's id cannot be reused before it ends.)"""
    entry = _table.get(key)
    if entry is not None and entry.ref is ref:
        _table.pop(key, None)


def clear_caches() -> None:
    """Empty bryo's caches: cached flattenings, compiled GraphDef builders, and every cache
    other bryo packages registered (the lifted transforms' call plans, ...).

    Nothing changes but speed: the next calls rebuild what they need (to release memory).
    After changing a node behind bryo's back (through `vars(node)` or
    `object.__setattr__`, which change tracking cannot see), call
    `structure_changed(node)` instead: it also drops the node's own cached pytree data.
    """
    _clear_graph_caches()
    clear_registered()


def _clear_graph_caches() -> None:
    with _table_lock:
        entries = list(_table.values())
        _table.clear()
    for entry in entries:
        entry.flat.watch.expire()  # type: ignore[union-attr]  # a cached flattening has a watch
    for owner in list(_owners.values()):
        flat = owner.__dict__.pop(_CACHE, None)
        if flat is not None:
            flat.watch.expire()
    _owners.clear()
    for graphdef in list(_compiled.values()):
        graphdef._forget_builder()
    _compiled.clear()


# Handing a merge's flattening over -------------------------------------------------
#
# `merge` knows the graph it built: its GraphDef, its State leaves in order, and every
# node and Variable it made or put in, by GraphDef index. It leaves them on the new root
# (an `Object`, `List` or `Dict`, under `MERGED`), and the root's first flattening, if
# nothing was written anywhere since (the write counter of `_tracking` moved by exactly
# the flattening's own tick), makes its `FlatGraph` from them instead of walking the
# graph, sorting attributes and building a GraphDef equal to the one merge got.
#
# That is right only where walking the built graph gives back that GraphDef, with each
# leaf's parent and each node being the object built for its index. The first flattening
# of a graph merged from a GraphDef walks as before and checks exactly that: the walk's
# GraphDef equals the merged one and every parent, node and watched object is one the
# merge built; only then does the GraphDef keep a `_HandoverPlan` (under the node types
# and data types it was checked with: a plugin or `register_data_type` since then makes
# the next flattening check again). Its nodes must be of core-graph's own kinds (Objects,
# `List`, `Dict`, tuples), whose walk depends only on what the GraphDef fixes. What a
# merge's State may change is checked at each handover: each Variable is of its entry's
# class and no Variable was given twice (the walk would find a shared reference), raw
# leaves are arrays (not Variables, refs or graph nodes). Otherwise the root is walked.
#
# The record holds no reference to the root (no reference cycle: a merged model is freed
# by reference counting), and the root's flattening takes it away, whether it uses it or
# not; a copy or pickle of the root drops it.

_Objects = Sequence[object] | dict[int, object]
"""A merge's nodes and Variables by GraphDef index (a tuple from a compiled builder, a
dict from the walking one), without the root."""


class _Merged:
    """What `merge` leaves on the root it built (under `MERGED`)."""

    __slots__ = ("graphdef", "leaves", "objects", "writes")

    def __init__(self, graphdef: GraphDef, leaves: tuple, objects: _Objects, writes: int) -> None:
        self.graphdef = graphdef
        self.leaves = leaves  # the State leaves, in GraphDef order
        self.objects = objects
        self.writes = writes  # the write counter's tick once the graph was built


# The node kinds whose walk depends only on what the GraphDef fixes (by flatten function)
_FAITHFUL = frozenset({object_flatten, _list_flatten, _dict_flatten, _tuple_flatten})


class _HandoverPlan:
    """How a flattening of a graph merged from one GraphDef is made from the merge's
    objects (by GraphDef index), checked once against a walk."""

    __slots__ = ("data_types", "epoch", "nodes", "sources", "tracked")

    def __init__(
        self,
        epoch: int | None,
        known_data: dict,
        sources: tuple[tuple[int | None, type, int, NodeType, Key], ...],
        nodes: tuple[tuple[Path, int], ...],
        tracked: tuple[int, ...],
    ) -> None:
        self.epoch = epoch  # the node types' registry epoch it was checked under
        self.data_types = known_data  # `data_types()` it was checked under
        # per State leaf: (index of its Variable or None for a raw leaf, its leaf type,
        # index of its parent, the parent's node type, its key)
        self.sources = sources
        self.nodes = nodes  # (path, index) of each mutable node, children first
        self.tracked = tracked  # indices of the nodes and Variables a watch goes on


def _handed_over(node: object, merged: _Merged, keep: bool) -> FlatGraph | None:
    """The flattening of the graph `merge` just built (`node`, its root), made from what
    the merge knew; None where it cannot be (then `node` is walked)."""
    graphdef = merged.graphdef
    plan = graphdef._handover
    if type(plan) is not _HandoverPlan:
        return None
    registry = node_types()
    if plan.epoch != registry.epoch or plan.data_types is not data_types():
        return None
    objects = merged.objects
    found = list(objects) if type(objects) is tuple else objects
    found[graphdef.root.index] = node  # type: ignore[index]  # a list or the merge's own dict
    leaves = merged.leaves
    sources = []
    variables = []
    for position, (at, leaf_type, parent, parent_type, key) in enumerate(plan.sources):
        if at is not None:
            variable = cast(Variable, found[at])
            if type(variable) is not leaf_type and variable_class(variable) is not leaf_type:
                return None  # a Variable of another class than the GraphDef's
            variables.append(variable)
            source = LeafSource(variable, None, leaf_type, found[parent], parent_type, key)
        else:
            value = leaves[position]
            if (
                isinstance(value, Variable)  # (merge put in its value of the time)
                or not is_shaped(value)
                or is_ref(value)
                or registry.lookup(type(value)) is not None
            ):
                return None
            source = LeafSource(None, value, leaf_type, found[parent], parent_type, key)
        sources.append(source)
    if len(set(map(id, variables))) != len(variables):
        return None  # a Variable given at two paths: the graph shares it
    nodes = [(path, found[at]) for path, at in plan.nodes]
    flat = FlatGraph(graphdef, list(graphdef.leaf_order), sources, nodes)
    watch = flat.watch = Watch()
    registered = watch_all(watch, [found[at] for at in plan.tracked])
    if write_count() != merged.writes + 1:  # the graph may have changed since merge
        watch.expire()
        return None
    if not registered:
        watch.expire()
    elif keep:
        _keep_own(node, flat)
    return flat


def _check_handover(merged: _Merged, root: object, flat: FlatGraph, walk: _Flattener) -> None:
    """After walking the graph `merge` built (nothing written since), check whether its
    GraphDef's merges can hand their flattening over, and keep the answer on it."""
    graphdef = merged.graphdef
    plan = graphdef._handover
    if plan is False:
        return
    registry = walk.registry
    if (
        type(plan) is _HandoverPlan
        and plan.epoch == registry.epoch
        and plan.data_types is data_types()
    ):
        return  # (the handover was refused for this merge's State)
    graphdef._handover = _handover_plan(merged, root, flat, walk) or False


def _handover_plan(
    merged: _Merged, root: object, flat: FlatGraph, walk: _Flattener
) -> _HandoverPlan | None:
    graphdef = merged.graphdef
    if (
        not walk.cacheable
        or walk.guards  # (nodes that can change unseen: checked at each reuse instead)
        or type(graphdef.root) is not NodeEntry
        or flat.graphdef != graphdef
    ):
        return None
    registry = walk.registry
    for entry in graphdef.nodes:
        if type(entry) is NodeEntry:
            node_type = registry.lookup(entry.type)
            if node_type is None or node_type.flatten not in _FAITHFUL:
                return None
    objects = merged.objects
    index = {id(root): graphdef.root.index}
    for at, obj in objects.items() if type(objects) is dict else enumerate(objects):
        if obj is not None:
            index[id(obj)] = at
    sources = []
    for source in flat.sources:
        parent = index.get(id(source._parent))
        if source.variable is not None:
            at = index.get(id(source.variable))
            if at is None:
                return None
        elif is_ref(source.value) or not is_shaped(source.value):
            return None  # (a handover takes raw leaves that are arrays only)
        else:
            at = None
        if parent is None:
            return None  # a node its parent's flatten made on the fly
        sources.append((at, source.leaf_type, parent, source.parent_type, source.key))
    nodes = tuple((path, index.get(id(node), -1)) for path, node in flat.nodes)
    tracked = tuple(index.get(id(obj), -1) for obj in walk.tracked)
    if any(at < 0 for _, at in nodes) or any(at < 0 for at in tracked):
        return None
    return _HandoverPlan(registry.epoch, data_types(), tuple(sources), nodes, tracked)


# Unflattening -----------------------------------------------------------------------


def _check_fits(graphdef: GraphDef, flat: Mapping[Path, object]) -> None:
    expected = graphdef.leaf_paths
    if len(flat) == len(expected) and all(path in expected for path in flat):
        return
    missing = sorted((p for p in expected if p not in flat), key=repr)
    extra = sorted((p for p in flat if p not in expected), key=repr)
    problems = []
    if missing:
        problems.append(f"missing {_list_paths(missing)}")
    if extra:
        problems.append(f"not in the graph {_list_paths(extra)}")
    count = (
        f" (Incorrect number of leaves: {len(flat)} given, {len(expected)} expected)"
        if len(flat) != len(expected)
        else ""
    )
    raise GraphError(
        f"the state does not fit the graphdef{count}: {'; '.join(problems)}. Merge states that "
        "came from splitting a graph with this GraphDef (all of its groups), or rebuild the "
        "GraphDef from the model you want to merge into."
    )


def _list_paths(paths: list[Path], limit: int = 6) -> str:
    shown = ", ".join(path_str(p) for p in paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


# Public functions -------------------------------------------------------------------


def flatten_state(node: object, /) -> tuple[GraphDef, State]:
    """`node`'s GraphDef and its whole State (`graph.flatten` of seed 000)."""
    flat = flat_graph(node)
    return flat.graphdef, State._from_flat(flat.flat_state())


def flatten(
    node: object, /, *, with_paths: bool = True, graph: bool | None = None
) -> tuple[GraphDef | TreeDef, FlatState | list]:
    """`node`'s GraphDef and its State leaves as a `FlatState` of `(path, leaf)` pairs
    (Flax NNX's `nnx.flatten`), or as a bare list of leaves with `with_paths=False`.

    The leaves are the live Variables (and raw array leaves), in the order `unflatten`
    takes them back. `graph=False` flattens in tree mode (a `TreeDef`), the leaves in
    sorted path order as Flax's (a namedtuple's or dataclass's fields sorted by name).
    """
    if graph_mode(graph):
        flat = flat_graph(node)
        graphdef_, leaves = flat.graphdef, flat.flat_state()
    else:
        graphdef_, leaves = tree_flatten(node, "flatten")
        leaves = {path: leaves[path] for path in sorted_paths(leaves)}
    if with_paths:
        return graphdef_, FlatState(leaves.items())
    return graphdef_, list(leaves.values())


def unflatten(
    graphdef: GraphDef | TreeDef,
    state: State | Mapping | FlatState | list | object,
    /,
    *,
    recreate_variables: bool = True,
) -> _Any:
    """Build a new graph from `graphdef` and a State that fits it exactly; the Variables
    in the State become the new graph's (a bare Variable or array is its own State).

    `state` may also be what `flatten` returned: a `FlatState`, or the bare list of
    leaves (`with_paths=False`) in the GraphDef's order. `recreate_variables=False` puts a
    raw value where the GraphDef has a Variable as it is (Flax's `merge(...,
    recreate_variables=False)`)."""
    if isinstance(graphdef, TreeDef):
        if type(state) is list:
            paths = tuple(sorted_paths(graphdef.paths))
            state = FlatState.from_sorted_keys_values(paths, _counted(paths, state))
        if isinstance(state, FlatState):
            state = State.from_flat_path(state)
        return tree_merge(graphdef, (state,), copy=False, recreate_variables=recreate_variables)
    leaves = leaves_in_order(graphdef, state)
    if recreate_variables:
        node, objects = graphdef._build(leaves)
        if graphdef._handover is not False and isinstance(node, _OWN_CACHE):
            # for the first flattening of `node` (see `_handed_over`)
            node.__dict__[MERGED] = _Merged(graphdef, tuple(leaves), objects, write_count())
        return node
    return build_graph(graphdef.root, leaves, node_types(), recreate_variables=False).root


def leaves_in_order(graphdef: GraphDef, state: State | Mapping | FlatState | list | object) -> list:
    """The leaves of `state` in `graphdef.leaf_order`; a `GraphError` if it does not fit."""
    if isinstance(state, FlatState):
        state = State.from_flat_path(state)
    if type(state) is list and type(graphdef.root) is NodeEntry:
        return _counted(graphdef.leaf_order, state)
    if not isinstance(state, Mapping):
        _check_fits(graphdef, {(): state})
        return [state]
    flat = state._flat if isinstance(state, State) else State(state)._flat
    order = graphdef.leaf_order
    if len(flat) == len(order) and tuple(flat) == order:
        return list(flat.values())
    _check_fits(graphdef, flat)
    return [flat[path] for path in order]


def _counted(order: tuple[Path, ...], leaves: list) -> list:
    """`leaves` if there is one per path of `order`; else a `GraphError` saying so."""
    if len(leaves) != len(order):
        raise GraphError(
            f"Incorrect number of leaves: `unflatten` got {len(leaves)} for a GraphDef of "
            f"{len(order)} "
            f"({_list_paths(list(order))}); pass the leaves `flatten(..., with_paths=False)` "
            "returned for this GraphDef, in their order."
        )
    return leaves


def _own_state(flat: FlatGraph, leaves: dict[Path, _Any]) -> _Any:
    """The State of `leaves`, or the leaf itself when the graph is a bare Variable/array."""
    root_kind = type(flat.graphdef.root)
    if root_kind is NodeEntry or not leaves:
        return State._from_flat(leaves)
    return flat.sources[0].value if root_kind is LeafEntry else leaves[()]


def split(node: object, /, *filters: Filter, graph: bool | None = None) -> tuple[_Any, ...]:
    """`(graphdef, state)`, or `(graphdef, state_1, ..., state_n)`, one per filter.

    Each value goes to the first filter that matches it (filtering is order-dependent:
    put specific filters before general ones). A value that no filter matches raises a
    `ValueError` naming its path and value; end with `...` to catch the rest. The States
    hold the graph's live Variables. `graph=False` splits in tree mode (a `TreeDef`).
    """
    if not graph_mode(graph):
        return tree_split(node, filters)
    flat = flat_graph(node)
    if not filters:
        return flat.graphdef, _own_state(flat, flat.flat_state())
    groups = flat.grouped(filters, require_all=True)
    if type(flat.graphdef.root) is not NodeEntry:  # a bare Variable or array: itself
        groups = tuple(_own_state(flat, group._flat) for group in groups)
    return (flat.graphdef, *groups)


def state(node: object, /, *filters: Filter, graph: bool | None = None) -> _Any:
    """`node`'s State (its live Variables), or one sub-State per filter (values matching
    none are left out). `graph=False` reads it in tree mode."""
    if not graph_mode(graph):
        return tree_state(node, filters)
    flat = flat_graph(node)
    if not filters:
        return _own_state(flat, flat.flat_state())
    states = flat.grouped(filters, require_all=False)
    return states[0] if len(filters) == 1 else states


def graphdef(node: object, /, *, graph: bool | None = None) -> GraphDef | TreeDef:
    """`node`'s GraphDef (its `TreeDef` with `graph=False`)."""
    if not graph_mode(graph):
        return tree_flatten(node, "graphdef")[0]
    return flat_graph(node).graphdef


def unpack(node: object, /, *filters: Filter, graph: bool | None = None) -> _Any:
    """Like `split`, with the GraphDef bundled into each State: a `GraphState`, or one per
    filter when there are several. `merge(*graph_states)` rebuilds the node."""
    graphdef_, *states = split(node, *filters, graph=graph)
    bundled = tuple(GraphState(graphdef_, state) for state in states)
    return bundled[0] if len(bundled) == 1 else bundled


_NO_STATE: _Any = object()


def merge(
    graphdef: GraphDef | TreeDef | GraphState,
    state: State | Mapping | Variable | object = _NO_STATE,
    /,
    *states: State | Mapping,
    copy: bool = False,
    recreate_variables: bool = True,
) -> _Any:
    """A new graph from `graphdef` and the States `split` returned (in any grouping), or
    from the GraphStates `unpack` returned (`merge(params, rest)`).

    The Variables in the States become the new graph's own, as in Flax NNX 0.12 (so
    `merge(*split(model))` shares them with `model`); `copy=True` copies them instead.
    A raw value where the graph had a Variable becomes a Variable of that type and
    metadata, or stays the raw value with `recreate_variables=False`.
    """
    if isinstance(graphdef, GraphState):
        given = states if state is _NO_STATE else (state, *states)
        graphdef, parts = graph_states_parts(graphdef, given)
        return merge(graphdef, *parts, copy=copy, recreate_variables=recreate_variables)
    if state is _NO_STATE:
        raise TypeError(
            "merge() missing 1 required positional argument: 'state'. `merge` takes a "
            "GraphDef and the States `split` returned (or only GraphStates from `unpack`); "
            "got a GraphDef and no State."
        )
    if isinstance(state, FlatState):  # what `flatten` returned
        state = State.from_flat_path(state)
    if states and any(not isinstance(each, Mapping) for each in (state, *states)):
        # a bare Variable or array split with filters: its empty States go
        kept = [s for s in (state, *states) if not (isinstance(s, Mapping) and not s)]
        # normally only the leaf stays; any rest goes to State.merge, which takes States
        state, states = kept[0], cast(tuple[State | Mapping, ...], tuple(kept[1:]))
    if isinstance(graphdef, TreeDef):
        return tree_merge(
            graphdef, (state, *states), copy=copy, recreate_variables=recreate_variables
        )
    if not isinstance(graphdef, GraphDef):
        raise TypeError(
            f"`merge` takes the GraphDef `split` returned first; got {type(graphdef).__name__}."
        )
    # Several are States (or mappings of leaves); only a lone one may be a bare leaf.
    merged = State.merge(cast(State | Mapping, state), *states) if states else state
    if copy:
        merged = _copied(merged)
    return unflatten(graphdef, merged, recreate_variables=recreate_variables)


def _copied(state: object) -> object:
    if isinstance(state, Variable):
        return state.copy()
    if not isinstance(state, Mapping):
        return state
    flat = state._flat if isinstance(state, State) else State(state)._flat
    return State._from_flat(
        {p: v.copy() if isinstance(v, Variable) else v for p, v in flat.items()}
    )


def update(node: object, state: State | Mapping, /, *states: State | Mapping) -> None:
    """Write the values of `states` into `node`'s Variables and array leaves, in place.

    A path the graph does not have is added under its parent node (a Variable given is
    copied in). All paths are checked before anything is written: a path whose parent is
    not a node of the graph, or an array leaf inside an immutable node, raises a
    `GraphError` naming the paths, and leaves the model exactly as it was.
    """
    if isinstance(node, Variable):
        write_variable(node, _single_state(node, (state, *states)))
        return
    flat = flat_graph(node)
    given = [s._state if isinstance(s, GraphState) else s for s in (state, *states)]
    updates = State.merge(*given)._flat
    index = flat.index
    new = [path for path in updates if path not in index]
    parents = _new_leaf_parents(node, flat, new)
    raw = [path for path in updates if path in index and index[path].variable is None]
    frozen = [
        path
        for path in raw
        if index[path].parent_type is None or not index[path].parent_type.set_key  # type: ignore[union-attr]  # checked
    ]
    if frozen:
        raise GraphError(
            f"`update` cannot write {_list_paths(frozen)}: those arrays sit in immutable "
            "nodes (Equinox-style modules or tuples). Build an updated copy with "
            "`merge(graphdef, state)` instead."
        )
    if raw or new:  # a backend's `set_key`s write first: one that raises is undone
        _set_keys(updates, index, parents)
    for path, leaf in updates.items():
        source = index.get(path)
        if source is not None and source.variable is not None:
            write_variable(source.variable, leaf)


def _set_keys(
    updates: Mapping[Path, object],
    index: Mapping[Path, LeafSource],
    parents: dict[Path, tuple[object, NodeType]],
) -> None:
    """`update`'s writes through the node types' `set_key` (new paths, raw leaves); a
    `set_key` that raises is named, after what the others wrote is undone."""
    written: list[tuple[Path, LeafSource | None]] = []
    for path, leaf in updates.items():
        source = index.get(path)
        if source is not None and source.variable is not None:
            continue
        try:
            if source is None:
                parent, parent_type = parents[path]
                value = leaf.copy() if isinstance(leaf, Variable) else leaf
                parent_type.set_key(parent, path[-1], value)  # type: ignore[misc]  # _new_leaf_parents found a settable parent
            else:
                value = leaf.raw_value if isinstance(leaf, Variable) else leaf
                source.parent_type.set_key(source.parent, source.key, value)  # type: ignore[union-attr]  # settable: `frozen` is empty
        except Exception as error:
            _undo_set_keys(written, parents)
            parent_type = parents[path][1] if source is None else source.parent_type
            where = f"while `update` wrote {path_str(path)}"
            node_callback_failed(parent_type, "set_key", where, error=error)  # type: ignore[arg-type]  # settable
        written.append((path, source))


def _undo_set_keys(
    written: list[tuple[Path, LeafSource | None]], parents: dict[Path, tuple[object, NodeType]]
) -> None:
    """Put back, last first, what `update`'s `set_key`s wrote before one failed: the old
    raw leaves, and (with `pop_key`) no new ones."""
    for path, source in reversed(written):
        try:
            if source is None:
                parent, parent_type = parents[path]
                if parent_type.pop_key is not None:
                    parent_type.pop_key(parent, path[-1])
            else:
                source.parent_type.set_key(source.parent, source.key, source.value)  # type: ignore[union-attr]  # it wrote
        except Exception:  # undoing as much as it can; the error is the first
            continue


def _single_state(variable: Variable, states: tuple) -> object:
    given = [s for s in states if not (isinstance(s, Mapping) and not s)]
    if len(given) != 1:
        raise GraphError(
            f"`update` of a bare {type(variable).__name__} takes exactly one non-empty state "
            f"(a Variable or a value); got {len(given)}."
        )
    return given[0]


def _new_leaf_parents(
    root: object, flat: FlatGraph, paths: list[Path]
) -> dict[Path, tuple[object, NodeType]]:
    """The live parent node of each path to add; a `GraphError` if one has none."""
    if not paths:
        return {}
    registry = node_types()
    # the mutable nodes by path; plain dicts and lists are looked up, and remembered
    live: dict[Path, object] = dict(flat.nodes)
    live[()] = root
    parents: dict[Path, tuple[object, NodeType]] = {}
    orphans = []
    for path in paths:
        parent = _live_node(live, path[:-1], registry) if path else _NO_NODE
        node_type = registry.lookup(type(parent)) if parent is not _NO_NODE else None
        if node_type is None or node_type.set_key is None:
            orphans.append(path)
        else:
            parents[path] = (parent, node_type)
    if orphans:
        known = (
            f"The model's paths include {_list_paths(flat.paths)}"
            if flat.paths
            else "The model has no State paths"
        )
        raise GraphError(
            f"`update` got paths the model does not have: {_list_paths(orphans)}, and cannot "
            "add them: a new path must sit directly under a mutable node of the model (a "
            f"module, List, Dict, dict or list). {known}; pass a State split from this "
            "model, or add the missing nodes first."
        )
    return parents


def _live_node(known: dict[Path, object], path: Path, registry: TypeTable[NodeType]) -> object:
    """The node at `path`, walked down from its nearest ancestor in `known` (which holds
    the root at `()`), each node on the way remembered there; else `_NO_NODE`."""
    start = len(path)
    while path[:start] not in known:
        start -= 1
    node = known[path[:start]]
    for depth in range(start, len(path)):
        node_type = registry.lookup(type(node))
        if node_type is None:
            return _NO_NODE
        children, _ = node_type.flatten(node)
        key = path[depth]
        node = next((child for k, child in children if k == key), _NO_NODE)
        if node is _NO_NODE:
            return _NO_NODE
        known[path[: depth + 1]] = node
    return node


_NO_NODE = object()


def clone(
    node: object,
    /,
    variables: bool = True,
    *,
    arrays: bool = False,
    graph: bool | None = None,
) -> _Any:
    """A deep copy of `node` with the same sharing: new nodes, and new Variables unless
    `variables=False`; `arrays=True` also copies the arrays (distinct buffers, as
    `jax.jit(donate_argnums=...)` needs)."""
    if arrays and not variables:
        raise ValueError("`clone(arrays=True)` copies the Variables too; drop `variables=False`.")
    graphdef_, *states = split(node, graph=graph)
    if arrays:
        states = [jax.tree.map(jax.numpy.copy, s) for s in states]
        return merge(graphdef_, *states)
    return merge(graphdef_, *states, copy=variables)


def pop(node: object, /, *filters: Filter) -> _Any:
    """Remove the Variables matching `filters` from `node` and return them as State(s)."""
    if not filters:
        raise TypeError("`pop` needs at least one filter, e.g. `pop(model, Intermediate)`.")
    flat = flat_graph(node)
    flat_state = flat.flat_state()
    states = group_flat(flat_state, filters, require_all=False)
    for group in states:
        for path in group._flat:
            source = flat.index[path]
            if source.parent_type is None or source.parent_type.pop_key is None:
                raise GraphError(
                    f"`pop` cannot remove {path_str(path)}: its parent "
                    f"{type(source.parent).__name__} cannot drop children in place."
                )
    for group in states:
        for path in group._flat:
            source = flat.index[path]
            try:
                source.parent_type.pop_key(source.parent, source.key)  # type: ignore[union-attr]  # checked in the loop above
            except Exception as error:
                where = f"while `pop` removed {path_str(path)}"
                unchanged = "The paths before it were removed already."
                node_callback_failed(
                    source.parent_type,  # type: ignore[arg-type]  # checked in the loop above
                    "pop_key",
                    where,
                    error=error,
                    unchanged=unchanged,
                )
    return states[0] if len(filters) == 1 else states


def iter_graph(node: object, /, *, graph: bool | None = None) -> Iterator[tuple[Path, _Any]]:
    """Every node, Variable and leaf of `node` with its path, each once, children first
    (`graph=False`: the pytree's nodes and leaves; shared references are an error)."""
    if not graph_mode(graph):
        yield from tree_iter(node)
        return
    registry = node_types()
    seen: set[int] = set()
    walked: list[object] = []  # keeps the nodes a `flatten` made on the fly alive (ids)
    # (value, path, children): `children` is None until the value's children are listed
    stack: list[tuple[object, Path, Iterator[tuple[Key, object]] | None]] = [(node, (), None)]
    while stack:
        value, path, children = stack[-1]
        if children is None:
            node_type = registry.lookup(type(value))
            if node_type is not None or isinstance(value, Variable):
                if id(value) in seen:
                    stack.pop()
                    continue
                seen.add(id(value))
                walked.append(value)
            items = list(node_type.flatten(value)[0]) if node_type is not None else []
            children = iter(items)
            stack[-1] = (value, path, children)
        child = next(children, None)  # children are (key, value) pairs, never None
        if child is None:
            stack.pop()
            yield path, value
        else:
            key, child_value = child
            stack.append((child_value, (*path, key), None))


def variables(node: object, /, *filters: Filter) -> _Any:
    """`node`'s live Variables by path (not snapshots), optionally filtered like `state`."""
    flat = flat_graph(node)
    found: dict[Path, object] = {
        p: s.variable
        for p, s in zip(flat.paths, flat.sources, strict=True)
        if s.variable is not None
    }
    if not filters:
        return State._from_flat(found)
    predicates = filters_to_predicates(filters)
    groups = group_flat(found, tuple(predicates), require_all=False)
    return groups[0] if len(filters) == 1 else groups


Key = Key  # re-exported for `graph.Key` (seed 000 annotates paths with it)
