"""Stage 2 of a lifted call: the call's `Signature` (static) and `CallPlan` (live).

`build_plan` flattens a call's graph roots together, as the pair `(roots, ())`, so that
references shared across arguments stay shared. The `Signature` is the hashable static
side (the GraphDef, the Variables' types and metadata, the arguments' layouts): equally
structured calls share it, and so share a compiled function. The `CallPlan` is the live
side: the caller's Variables and raw leaves in State order, read before the call and
written after it. `PlanCache` keeps both per transformed function, keyed by `CallKey`.
"""

from __future__ import annotations

import contextlib
import operator
import threading
import weakref
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

import jax
import jax.core

from bryo_graph import (
    Entry,
    GraphDef,
    GraphError,
    LeafEntry,
    LeafSource,
    NodeEntry,
    RefEntry,
    Variable,
    VariableEntry,
    VariableMeta,
    flat_graph,
    node_types,
    raw_value_getter,
    register_cache,
)
from bryo_pytree import Key, Path, path_str

from ._errors import concurrent_update
from ._layout import ROOT, ArgLayout, CallKey

raw_value = operator.attrgetter("raw_value")

# A call's read of its Variables and its write-back are each atomic under this lock; the
# values a thread read are kept per plan until its write-back checks them.
WRITE_LOCK = threading.RLock()
_reads = threading.local()


def _reads_of_thread() -> dict[int, tuple[list, bool]]:
    try:
        return _reads.by_plan
    except AttributeError:
        _reads.by_plan = {}
        return _reads.by_plan


class PairPath(NamedTuple):
    """A State leaf's path in the pair `(input roots, output roots)` that the transforms
    flatten, taken apart: `(0, 2, 'linear', 'kernel')` is `PairPath(0, 2, ('linear',
    'kernel'))`, the kernel of the third input root."""

    side: int  # 0: the call's inputs, 1: graphs the function returned
    root: int
    inner: Path

    @classmethod
    def of(cls, path: Path) -> PairPath:
        side, root, *inner = path
        return cls(side, root, tuple(inner))  # type: ignore[arg-type]  # a pair path starts with the side and root indices (ints)


def pair_side(graphdef: GraphDef, side: int) -> Entry:
    """The entry of one side (0: inputs, 1: outputs) of the pair a lifted call flattens."""
    root = graphdef.root
    if not isinstance(root, NodeEntry):
        raise GraphError(
            f"a lifted call's GraphDef must hold the pair `(inputs, outputs)`, got {root!r}; "
            "build it with `build_plan` or `flat_graph((inputs, outputs))`."
        )
    return root.child(side)


class RootPlace(NamedTuple):
    """Where a graph root sits in the arguments.

    Attributes:
        argument: the positional index, or the keyword's name.
        position: its position among that argument's leaves (0 for a bare root).
    """

    argument: int | str
    position: int

    @property
    def name(self) -> str:
        """`args[0]` or `kwargs['model']`, as error messages name the argument."""
        if isinstance(self.argument, int):
            return f"args[{self.argument}]"
        return f"kwargs[{self.argument!r}]"


class Signature:
    """The static side of a call: hashable, shared by calls on equally structured graphs.

    Attributes:
        graphdef: the GraphDef of `(roots, ())`, the roots being the arguments' graphs.
        layouts, kw_layouts: how to put the arguments back together around the roots.
        metas: per State leaf, the `VariableMeta` of a Variable, or None (a raw array).
        paths: per State leaf, its path in `(roots, ())`: `(0, root, *path in root)`.
        root_places: per root, its `RootPlace`.
        leaf_of_variable: GraphDef index of an input Variable -> its State leaf.
        leaf_of_raw: `(GraphDef index of the parent, key)` of an input raw array -> its
            State leaf.
    """

    __slots__ = (
        "_hash",
        "_root_leaves",
        "graphdef",
        "kw_layouts",
        "layouts",
        "leaf_of_raw",
        "leaf_of_variable",
        "metas",
        "n_vars",
        "paths",
        "root_places",
    )

    def __init__(
        self,
        graphdef: GraphDef,
        layouts: tuple[ArgLayout, ...],
        kw_layouts: tuple[tuple[str, ArgLayout], ...],
        metas: tuple[VariableMeta | None, ...],
        paths: list[Path],
    ) -> None:
        self.graphdef = graphdef
        self.layouts = layouts
        self.kw_layouts = kw_layouts
        self.metas = metas
        self.paths = paths
        self.n_vars = sum(meta is not None for meta in metas)
        self.leaf_of_variable: dict[int, int] = {}
        self.leaf_of_raw: dict[tuple[int, Key], int] = {}
        _index_leaves(graphdef.root, self.leaf_of_variable, self.leaf_of_raw)
        self.root_places = _root_places(layouts, kw_layouts)
        self._root_leaves: tuple[tuple[tuple[Path, int], ...], ...] | None = None
        self._hash = hash((graphdef, layouts, kw_layouts, metas))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, Signature)
            and self._hash == other._hash
            and self.graphdef == other.graphdef
            and self.layouts == other.layouts
            and self.kw_layouts == other.kw_layouts
            and self.metas == other.metas
        )

    def named_layouts(self) -> list[tuple[int | str, ArgLayout]]:
        """`(argument, layout)` for every argument: positions, then keyword names."""
        return [*enumerate(self.layouts), *self.kw_layouts]

    def root_leaves(self, j: int) -> tuple[tuple[Path, int], ...]:
        """`(path, k)` of every State leaf of root `j`, paths below that root, in the order
        `flat_graph(root)` lists them: a leaf the pair met first under an earlier root (a
        shared Variable or module) is listed again at its place in root `j`.

        Read off the GraphDef, never by flattening the root again: the nodes a backend
        makes while flattening (Equinox's views of a module's lists and pytrees) are new
        objects at each flattening, so a leaf cannot be found again by its parent's id.
        """
        if self._root_leaves is None:
            self._root_leaves = _leaves_per_root(self)
        return self._root_leaves[j]

    def describe_leaf(self, k: int) -> str:
        """Where State leaf `k` comes from, e.g. "`args[0]` at linear/kernel"."""
        place = PairPath.of(self.paths[k])
        name = self.root_places[place.root].name
        return f"`{name}`" + (f" at {path_str(place.inner)}" if place.inner else "")


def _index_leaves(
    root: Entry, of_variable: dict[int, int], of_raw: dict[tuple[int, Key], int]
) -> None:
    """Number the State leaves under `root` in order, by Variable index or parent/key
    (a walk with its own stack: a model of any depth)."""
    stack: list[tuple[Entry, int | None, Key | None]] = [(root, None, None)]
    while stack:
        entry, parent, key = stack.pop()
        if isinstance(entry, VariableEntry):
            of_variable[entry.index] = len(of_variable) + len(of_raw)
        elif isinstance(entry, LeafEntry):
            of_raw[(parent, key)] = len(of_variable) + len(of_raw)  # type: ignore[index]  # a LeafEntry is never the root: parent and key are set
        elif isinstance(entry, NodeEntry):
            stack.extend((child, entry.index, k) for k, child in reversed(entry.children))


def _leaves_per_root(sig: Signature) -> tuple[tuple[tuple[Path, int], ...], ...]:
    """`Signature.root_leaves` of every root (walks with their own stacks: any depth)."""
    nodes: dict[int, NodeEntry] = {}
    leaf_at = dict(sig.leaf_of_variable)  # GraphDef index of a Variable or raw ref -> leaf
    stack: list[Entry] = [sig.graphdef.root]
    while stack:
        entry = stack.pop()
        if isinstance(entry, NodeEntry):
            nodes[entry.index] = entry
            for key, child in entry.children:
                if isinstance(child, LeafEntry) and child.index is not None:
                    leaf_at[child.index] = sig.leaf_of_raw[(entry.index, key)]
                stack.append(child)
    per_root = []
    for _, root in pair_side(sig.graphdef, 0).children:  # type: ignore[union-attr]  # the roots' tuple is a node
        leaves: list[tuple[Path, int]] = []
        seen: set[int] = set()  # GraphDef indices met under this root
        walk: list[tuple[Entry, int, Path]] = [(root, -1, ())]
        while walk:
            entry, parent, path = walk.pop()
            if isinstance(entry, RefEntry):  # met before: here again unless under this root
                if entry.index in seen:
                    continue
                if entry.index in leaf_at:
                    seen.add(entry.index)
                    leaves.append((path, leaf_at[entry.index]))
                    continue
                entry = nodes[entry.index]
            if isinstance(entry, VariableEntry):
                seen.add(entry.index)
                leaves.append((path, leaf_at[entry.index]))
            elif isinstance(entry, LeafEntry):
                if entry.index is not None:
                    seen.add(entry.index)
                leaves.append((path, sig.leaf_of_raw[(parent, path[-1])]))
            elif isinstance(entry, NodeEntry):
                seen.add(entry.index)
                walk.extend(
                    (child, entry.index, (*path, key)) for key, child in reversed(entry.children)
                )
        per_root.append(tuple(leaves))
    return tuple(per_root)


def _root_places(
    layouts: tuple[ArgLayout, ...], kw_layouts: tuple[tuple[str, ArgLayout], ...]
) -> list[RootPlace]:
    named: list[tuple[int | str, ArgLayout]] = [*enumerate(layouts), *kw_layouts]
    return [
        RootPlace(argument, position)
        for argument, layout in named
        for position, kind in enumerate(layout.leaf_kinds)
        if kind is ROOT
    ]


IN_PLACE_CONTAINERS = (dict, list)
"""Variable values that identity cannot tell changed: a write may change them in place
(`Variable.set_value` writes into them), and a hijax Variable rebuilds them at every read."""


def _rebuilt_per_read(variable: Variable, value: object) -> bool:
    """Whether `variable.raw_value` is a new object at every read though unchanged: a
    hijax Variable holding a container (rebuilt from its leaves), which identity cannot
    tell changed or not."""
    return type(value) in IN_PLACE_CONTAINERS and variable.hijax


def meta_of(variable: Variable) -> VariableMeta:
    """`variable`'s type and (a copy of its) metadata. A hijax Variable counts as a plain
    one of its Variable class: the function sees a plain copy, and what it writes is
    written back into the caller's hijax Variable like into any other."""
    return VariableMeta(variable.var_type, variable.metadata)


class CallPlan:
    """The live side of a call: the caller's Variables and raw leaves, in State order."""

    __slots__ = (
        "_objects",
        "pair",
        "raw_values",
        "read",
        "sig",
        "sources",
        "variable_position",
        "variables",
    )

    def __init__(self, sig: Signature, pair: tuple, sources: list[LeafSource]) -> None:
        self.sig = sig
        self.pair = pair
        self.sources = sources
        self.variables = [s.variable for s in sources if s.variable is not None]
        self.read = raw_value_getter(self.variables)  # (the plan's Variables stay the same)
        self.raw_values = [s.value for s in sources if s.variable is None]
        ks = [k for k, s in enumerate(sources) if s.variable is not None]
        self.variable_position = {k: position for position, k in enumerate(ks)}
        self._objects: dict[int, object] | None = None

    def variable_values(self) -> list:
        """The Variables' current values, read at once; this thread's write-back checks
        that no other thread wrote them in between (see `writing`)."""
        with WRITE_LOCK:
            values = list(map(self.read, self.variables))
        _reads_of_thread()[id(self)] = (values, True)
        return values

    def values(self) -> tuple[list, list]:
        """The current `(variable values, raw leaves)` (the Variables' as `variable_values`)."""
        return self.variable_values(), self.raw_values

    def leaf_values(self) -> list:
        """The current value of every State leaf, in order, read at once (see `writing`)."""
        with WRITE_LOCK:
            leaves = [
                s.variable.raw_value if s.variable is not None else s.value for s in self.sources
            ]
        _reads_of_thread()[id(self)] = (leaves, False)
        return leaves

    @contextlib.contextmanager
    def writing(self, ks: Iterable[int], name: str) -> Iterator[None]:
        """Write back State leaves `ks` atomically, after checking that no other thread
        wrote one of their Variables since this thread read them.

        Raises:
            ConcurrentUpdateError: another thread's lifted call (`name` is this one's
                transform) updated the same Variables meanwhile; nothing is written.
        """
        with WRITE_LOCK:
            read = _reads_of_thread().pop(id(self), None)
            if read is not None:
                self._check_unread(ks, read, name)
            yield

    def _check_unread(self, ks: Iterable[int], read: tuple[list, bool], name: str) -> None:
        values, by_variable = read
        for k in ks:
            variable = self.sources[k].variable
            if variable is None:
                continue
            before = values[self.variable_position[k]] if by_variable else values[k]
            if variable.raw_value is not before and not _rebuilt_per_read(variable, before):
                raise concurrent_update(name, self.sig.describe_leaf(k))

    def write(self, k: int, value: object) -> None:
        """Write `value` into State leaf `k` of the caller's graph."""
        source = self.sources[k]
        if source.variable is not None:
            source.variable.set_raw_value(value)  # not through a subclass's set_value hook
            return
        node_type = source.parent_type
        if node_type is None or node_type.set_key is None:
            raise GraphError(
                f"{self.sig.describe_leaf(k)} changed inside the transform, but it is an array "
                f"inside an immutable {type(source.parent).__name__}; return the new node "
                "instead of changing it in place."
            )
        node_type.set_key(source.parent, source.key, value)

    @property
    def roots(self) -> tuple:
        """The caller's graph roots, in argument order."""
        return self.pair[0]

    @property
    def objects(self) -> dict[int, object]:
        """The caller's nodes and Variables by their GraphDef index."""
        if self._objects is None:
            self._objects = index_objects(self.sig.graphdef, self.pair)
        return self._objects


def build_plan(key: CallKey, roots: list, sig_cache: dict | None = None) -> CallPlan:
    """Flatten the roots together (sharing included) into a `CallPlan`."""
    pair = (tuple(roots), ())
    flat = flat_graph(pair)
    metas = tuple(meta_of(s.variable) if s.variable is not None else None for s in flat.sources)
    sig = Signature(flat.graphdef, key.layouts, key.kw_layouts, metas, flat.paths)
    if sig_cache is not None:
        sig = sig_cache.setdefault(sig, sig)
    return CallPlan(sig, pair, flat.sources)


def index_objects(graphdef: GraphDef, root: object) -> dict[int, object]:
    """Walk `graphdef` along the live graph `root`: GraphDef index -> node or Variable."""
    registry = node_types()
    objects: dict[int, object] = {}
    stack: list[tuple[Entry, object]] = [(graphdef.root, root)]
    while stack:  # its own stack: a model of any depth
        entry, value = stack.pop()
        if isinstance(entry, VariableEntry):
            objects[entry.index] = value
        elif isinstance(entry, NodeEntry):
            objects[entry.index] = value
            node_type = registry.lookup(entry.type)  # (a JaxPytree entry: not type(value))
            children = dict(node_type.flatten(value)[0])  # type: ignore[union-attr]  # a NodeEntry's type is registered (lookup found it when planning)
            stack.extend((child, children[key]) for key, child in reversed(entry.children))
    return objects


def has_tracers(values: Sequence[object]) -> bool:
    return any(isinstance(v, jax.core.Tracer) for v in values)


class PlanCache:
    """Bounded caches of one transformed function: call plans and signatures.

    Safe to share between threads (a lock guards every change). A cached plan holds the
    caller's models: `bryo_graph.clear_caches()` empties every PlanCache.
    """

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self.plans: dict[CallKey, CallPlan] = {}
        self.sigs: dict[Signature, Signature] = {}
        self._lock = threading.Lock()
        _plan_caches.add(self)

    def plan(self, key: CallKey, roots: list) -> CallPlan:
        plan = self.plans.get(key)
        if plan is not None:
            return plan
        with self._lock:
            plan = build_plan(key, roots, self.sigs)
            # Plans built under a trace hold tracers; they are used once, never cached.
            if not has_tracers(plan.raw_values) and not has_tracers(
                [v.raw_value for v in plan.variables]
            ):
                while len(self.plans) >= self.size:
                    self.plans.pop(next(iter(self.plans)))
                self.plans[key] = plan
            if len(self.sigs) > 4 * self.size:
                self.sigs.clear()
        return plan

    def clear(self) -> None:
        """Forget every plan and signature."""
        with self._lock:
            self.plans.clear()
            self.sigs.clear()


_plan_caches: weakref.WeakSet[PlanCache] = weakref.WeakSet()


def _clear_plan_caches() -> None:
    for cache in list(_plan_caches):
        cache.clear()


register_cache(_clear_plan_caches)
