"""Lifting: graph nodes in, flat arrays through a JAX transform, state updates back out.

Every lifted transform (`jit`, `vmap`, `grad`, `remat`, the graph-level `scan`) works the
same way. Outside, `prepare` finds the graph nodes among the arguments (modules of any
backend, `Rngs`, Variables; containers are walked as pytrees) and flattens them together,
so references shared across arguments stay shared, into a `Signature` (hashable: the
GraphDef, the Variables' types and metadata, the arguments' layout and static values)
and a `CallPlan` (the live Variables to read and write). The pure function that the JAX
transform sees rebuilds fresh objects from the signature and the traced values, calls the
user's function, and compares the graph afterwards with what it built: a value that is not
the traced input any more is an update, a node or Variable it did not build is new.
Updates, new leaves and array outputs leave the transform in *groups* (one per output
axis for `vmap`); a small static `OutPlan` says where each one goes, and `apply` writes
them into the caller's objects. Unchanged models with array outputs take a fast path: no
State, no VariableState and no graph walk per call, only a list of reads and the writes of
what changed.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import jax
import numpy as np

from bryo_pytree import Path, hashable, path_str, unwrap_hashable

from ._entries import (
    Entry,
    LeafEntry,
    NodeEntry,
    RefEntry,
    StaticEntry,
    VariableEntry,
    indices_under,
)
from ._graph import GraphDef, GraphError, _flatten, unflatten
from ._nodes import NodeType, node_types, structure_changed
from ._state import State
from ._variables import Variable, VariableState
from ._variables import VariableMeta as Meta

# Leaf kinds of the arguments' pytrees.
ARRAY = "array"  # a jax/numpy array or Python number: traced
ROOT = "root"  # a graph node or Variable: flattened into the shared graph
CONTAINERS = (dict, list, tuple)  # pytrees at the top level, graph nodes only inside graphs

_PY_NUMBERS = (int, float, complex, bool)
_raw_value = operator.attrgetter("raw_value")


class TransformError(ValueError):
    """A lifted transform was set up wrongly; the message names the argument and path."""


def is_array_value(value: object) -> bool:
    """Whether JAX can trace `value` (arrays, tracers, NumPy scalars, Python numbers)."""
    return type(value) in _PY_NUMBERS or isinstance(value, jax.Array | np.ndarray | np.generic)


def is_graph_leaf(value: object) -> bool:
    """Whether a transform treats `value` as a graph (not a pytree) at the top level."""
    if isinstance(value, Variable):
        return True
    node_type = node_types().lookup(type(value))
    return node_type is not None and node_type.type not in CONTAINERS


unwrap = unwrap_hashable  # a GraphDef STATIC entry or a `hashable` value, unwrapped


class Static:
    """A pytree with no leaves carrying `value`: static data out of a JAX transform.

    JAX rebuilds it from the output tree of the trace that made it, so each compiled
    version of a function returns its own plan.
    """

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value


jax.tree_util.register_pytree_node(Static, lambda s: ((), s.value), lambda value, _: Static(value))


# The arguments' layout ------------------------------------------------------------------


_kind_cache: dict[type, str | None] = {}
_kind_epoch: list[tuple[int, int]] = [(-1, 0)]


def _leaf_kind(value: object, registry: Any) -> str | None:
    """ARRAY, ROOT or None (a container or a static value), cached per type."""
    cls = type(value)
    epoch = registry.epoch
    if _kind_epoch[0] != epoch:
        _kind_cache.clear()
        _kind_epoch[0] = epoch
    try:
        return _kind_cache[cls]
    except KeyError:
        pass
    if issubclass(cls, Variable):
        kind: str | None = ROOT
    elif is_array_value(value):
        kind = ARRAY
    else:
        node_type = registry.lookup(cls)
        kind = ROOT if node_type is not None and node_type.type not in CONTAINERS else None
    _kind_cache[cls] = kind
    return kind


def _layout(value: object, registry: Any, roots: list, arrays: list) -> Hashable:
    """How one argument is laid out: ARRAY, ROOT, ('static', v) or ('tree', treedef, kinds)."""
    kind = _leaf_kind(value, registry)
    if kind is ARRAY:
        arrays.append(value)
        return ARRAY
    if kind is ROOT:
        roots.append(value)
        return ROOT
    leaves, treedef = jax.tree_util.tree_flatten(value, is_leaf=is_graph_leaf)
    if treedef.num_leaves == 1 and treedef.num_nodes == 1:
        return ("static", hashable(value))
    kinds = []
    for leaf in leaves:
        kind = _leaf_kind(leaf, registry)
        if kind is ARRAY:
            arrays.append(leaf)
        elif kind is ROOT:
            roots.append(leaf)
        else:
            kind = ("static", hashable(leaf))
        kinds.append(kind)
    return ("tree", treedef, tuple(kinds))


def _rebuild_layout(layout: Hashable, roots: Any, arrays: Any) -> object:
    if layout is ARRAY:
        return next(arrays)
    if layout is ROOT:
        return next(roots)
    if layout[0] == "static":  # type: ignore[index]
        return unwrap(layout[1])  # type: ignore[index]
    _, treedef, kinds = layout  # type: ignore[misc]
    leaves = [
        next(arrays) if k is ARRAY else next(roots) if k is ROOT else unwrap(k[1]) for k in kinds
    ]
    return treedef.unflatten(leaves)


def _identity(root: object) -> object:
    """What keys a root in the plan cache: its cached flattening, or the Variable itself."""
    return root if isinstance(root, Variable) else _flatten(root)


def scan_args(
    args: Sequence[object], kwargs: dict[str, object], static: frozenset[int | str] = frozenset()
) -> tuple[tuple, list, list]:
    """`(key, roots, arrays)` of a call: `key` identifies the plan (layout and roots)."""
    registry = node_types()
    roots: list = []
    arrays: list = []
    layouts = []
    for position, arg in enumerate(args):
        if position in static:
            layouts.append(("static", hashable(arg)))
        else:
            layouts.append(_layout(arg, registry, roots, arrays))
    kw_layouts = []
    for name in sorted(kwargs):
        value = kwargs[name]
        layout = (
            ("static", hashable(value))
            if name in static
            else _layout(value, registry, roots, arrays)
        )
        kw_layouts.append((name, layout))
    key = (tuple(layouts), tuple(kw_layouts), tuple(map(_identity, roots)))
    return key, roots, arrays


# Signature and plan ---------------------------------------------------------------------


class Signature:
    """The static side of a call: hashable, shared by calls on equally structured graphs.

    Attributes:
        graphdef: the GraphDef of `(roots, ())`, the roots being the arguments' graphs.
        layouts, kw_layouts: how to put the arguments back together around the roots.
        metas: per State leaf, `_Meta(type, metadata)` of a Variable, or None (raw array).
        paths: per State leaf, its path in `(roots, ())`.
        root_places: per root, `(argument name, position among the argument's leaves)`.
    """

    __slots__ = (
        "_hash",
        "graphdef",
        "kw_layouts",
        "layouts",
        "leaf_slots",
        "metas",
        "n_vars",
        "paths",
        "root_places",
    )

    def __init__(
        self,
        graphdef: GraphDef,
        layouts: tuple,
        kw_layouts: tuple,
        metas: tuple,
        paths: list[Path],
    ) -> None:
        self.graphdef = graphdef
        self.layouts = layouts
        self.kw_layouts = kw_layouts
        self.metas = metas
        self.paths = paths
        self.n_vars = sum(meta is not None for meta in metas)
        self.leaf_slots = _leaf_slots(graphdef)
        self.root_places = _root_places(layouts, kw_layouts)
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

    def describe_leaf(self, k: int) -> str:
        """Where State leaf `k` comes from, e.g. "`args[0]` at linear/kernel"."""
        path = self.paths[k]
        root = path[1]
        name, _ = self.root_places[root]
        return f"`{name}`" + (f" at {path_str(path[2:])}" if len(path) > 2 else "")


def _leaf_slots(graphdef: GraphDef) -> list[tuple]:
    """Per State leaf, in order: ('var', var index) or ('raw', parent index, key)."""
    slots: list[tuple] = []

    def walk(entry: Entry, parent: int | None, key: object) -> None:
        if isinstance(entry, VariableEntry):
            slots.append(("var", entry.index))
        elif isinstance(entry, LeafEntry):
            slots.append(("raw", parent, key))
        elif isinstance(entry, NodeEntry):
            for child_key, child in entry.children:
                walk(child, entry.index, child_key)

    walk(graphdef.root, None, None)
    return slots


def _root_places(layouts: tuple, kw_layouts: tuple) -> list[tuple[str, int]]:
    places: list[tuple[str, int]] = []
    named = [(f"args[{i}]", layout) for i, layout in enumerate(layouts)]
    named += [(f"kwargs[{name!r}]", layout) for name, layout in kw_layouts]
    for name, layout in named:
        if layout is ROOT:
            places.append((name, 0))
        elif isinstance(layout, tuple) and layout[0] == "tree":
            places.extend((name, i) for i, k in enumerate(layout[2]) if k is ROOT)
    return places


def meta_of(variable: Variable) -> Meta:
    return Meta(type(variable), dict(variable._metadata))


class CallPlan:
    """The live side of a call: the caller's Variables and raw leaves, in State order."""

    __slots__ = (
        "_objects",
        "pair",
        "raw_values",
        "reads",
        "sig",
        "sources",
        "variables",
        "writers",
    )

    def __init__(self, sig: Signature, pair: tuple, sources: list) -> None:
        self.sig = sig
        self.pair = pair
        self.sources = sources
        self.variables = [s.variable for s in sources if s.variable is not None]
        self.raw_values = [s.value for s in sources if s.variable is None]
        self._objects: dict[int, object] | None = None

    def values(self) -> tuple[list, list]:
        """The current `(variable values, raw leaves)`."""
        return list(map(_raw_value, self.variables)), self.raw_values

    def leaf_values(self) -> list:
        """The current value of every State leaf, in order."""
        return [s.variable.raw_value if s.variable is not None else s.value for s in self.sources]

    def write(self, k: int, value: object) -> None:
        """Write `value` into State leaf `k` of the caller's graph."""
        source = self.sources[k]
        if source.variable is not None:
            source.variable.value = value
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
    def objects(self) -> dict[int, object]:
        """The caller's nodes and Variables by their GraphDef index."""
        if self._objects is None:
            self._objects = index_objects(self.sig.graphdef, self.pair)
        return self._objects


def build_plan(key: tuple, roots: list, sig_cache: dict | None = None) -> CallPlan:
    """Flatten the roots together (sharing included) into a `CallPlan`."""
    pair = (tuple(roots), ())
    flat = _flatten(pair)
    metas = tuple(meta_of(s.variable) if s.variable is not None else None for s in flat.sources)
    sig = Signature(flat.graphdef, key[0], key[1], metas, flat.paths)
    if sig_cache is not None:
        sig = sig_cache.setdefault(sig, sig)
    return CallPlan(sig, pair, flat.sources)


def index_objects(graphdef: GraphDef, root: object) -> dict[int, object]:
    """Walk `graphdef` along the live graph `root`: GraphDef index -> node or Variable."""
    registry = node_types()
    objects: dict[int, object] = {}

    def walk(entry: Entry, value: object) -> None:
        if isinstance(entry, VariableEntry):
            objects[entry.index] = value
        elif isinstance(entry, NodeEntry):
            objects[entry.index] = value
            node_type = registry.lookup(type(value))
            children = dict(node_type.flatten(value)[0])  # type: ignore[union-attr]
            for key, child in entry.children:
                walk(child, children[key])

    walk(graphdef.root, root)
    return objects


def has_tracers(values: Sequence[object]) -> bool:
    return any(isinstance(v, jax.core.Tracer) for v in values)


class PlanCache:
    """Bounded caches of one transformed function: call plans and signatures."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self.plans: dict[tuple, CallPlan] = {}
        self.sigs: dict[Signature, Signature] = {}

    def plan(self, key: tuple, roots: list) -> CallPlan:
        plan = self.plans.get(key)
        if plan is not None:
            return plan
        plan = build_plan(key, roots, self.sigs)
        # Plans built under a trace hold tracers; they are used once, never cached.
        if not has_tracers(plan.raw_values) and not has_tracers(
            [v.raw_value for v in plan.variables]
        ):
            if len(self.plans) >= self.size:
                self.plans.pop(next(iter(self.plans)))
            self.plans[key] = plan
        if len(self.sigs) > 4 * self.size:
            self.sigs.clear()
        return plan


# Inside the transform -------------------------------------------------------------------


class Inner:
    """The objects a pure function built from a signature: roots and values by index."""

    __slots__ = ("built", "in_values", "roots", "sig")

    def __init__(self, sig: Signature, built: dict[int, object], roots: tuple, in_values: list):
        self.sig = sig
        self.built = built
        self.roots = roots
        self.in_values = in_values


def rebuild(sig: Signature, leaf_values: Sequence[object], arrays: Sequence[object]) -> tuple:
    """`(args, kwargs, inner)`: fresh arguments built from `sig` and the (traced) values."""
    flat = {
        path: value if meta is None else VariableState(meta.type, value, **meta.metadata)
        for path, meta, value in zip(sig.paths, sig.metas, leaf_values, strict=True)
    }
    pair = unflatten(sig.graphdef, State.from_flat_path(flat))
    built = index_objects(sig.graphdef, pair)
    roots_it, arrays_it = iter(pair[0]), iter(arrays)
    args = tuple(_rebuild_layout(layout, roots_it, arrays_it) for layout in sig.layouts)
    kwargs = {name: _rebuild_layout(layout, roots_it, arrays_it) for name, layout in sig.kw_layouts}
    return args, kwargs, Inner(sig, built, pair[0], list(leaf_values))


def join_leaves(sig: Signature, var_values: Sequence, raw_values: Sequence) -> list:
    """Interleave Variable values and raw leaves back into State order."""
    var_it, raw_it = iter(var_values), iter(raw_values)
    return [next(raw_it) if meta is None else next(var_it) for meta in sig.metas]


class Grouping:
    """Where values leave a transform: one group per output axis (`vmap`), or one group.

    Subclasses say which group an updated input leaf, a new leaf of an input graph, and
    an output leaf go to. The base class puts everything in group 0.
    """

    n_groups = 1
    direct_ok = True  # plain array outputs may leave the transform as they are

    def input_group(self, k: int) -> int:
        return 0

    def new_input_group(self, root: int, path: Path, leaf: object) -> int:
        return 0

    def output_group(self, spec: object, path: Path, leaf: object) -> int:
        return 0

    def output_specs(self, out: object, treedef: Any) -> list:
        """Per leaf of the output (graph leaves included), what `output_group` receives."""
        return [None] * treedef.num_leaves


class OutPlan:
    """What left a transform and where it goes (static; built once per trace).

    Attributes:
        sets: `(k, group, position)`: State leaf `k` of the inputs takes that value.
        set_consts: `(k, value)`: State leaf `k` takes a Python value.
        graph: None when the inputs kept their structure and no graph leaf is returned;
            else `(graphdef, node_map, leaf_plans, inputs_unchanged)` for `reconcile`.
        out: None when the output left the transform as is; else `(treedef, plans)` with
            one plan per output leaf: ('graph', j), ('group', g, pos) or ('const', value).
    """

    __slots__ = ("graph", "out", "set_consts", "sets")

    def __init__(self, sets: tuple, set_consts: tuple, graph: tuple | None, out: tuple | None):
        self.sets = sets
        self.set_consts = set_consts
        self.graph = graph
        self.out = out


def collect(inner: Inner, out: object, grouping: Grouping) -> tuple[list[list], object, OutPlan]:
    """After the user's function: `(groups, direct output or None, OutPlan)`."""
    sig = inner.sig
    groups: list[list] = [[] for _ in range(grouping.n_groups)]

    def place(group: int, value: object) -> tuple:
        if not isinstance(value, jax.Array | np.ndarray | np.generic):
            return ("const", value)
        groups[group].append(value)
        return ("group", group, len(groups[group]) - 1)

    out_leaves, out_treedef = jax.tree_util.tree_flatten(out, is_leaf=is_graph_leaf)
    out_roots = [leaf for leaf in out_leaves if is_graph_leaf(leaf)]
    specs: list | None = None
    if out_roots or not grouping.direct_ok:
        specs = grouping.output_specs(out, out_treedef)
    root_specs = [
        spec for spec, leaf in zip(specs or (), out_leaves, strict=False) if is_graph_leaf(leaf)
    ]

    post_pair = (inner.roots, tuple(out_roots))
    post = _flatten(post_pair)
    inner_index = {id(obj): index for index, obj in inner.built.items()}
    post_objects = index_objects(post.graphdef, post_pair)
    node_map = {
        index: inner_index[id(obj)] for index, obj in post_objects.items() if id(obj) in inner_index
    }
    var_leaf = {slot[1]: k for k, slot in enumerate(sig.leaf_slots) if slot[0] == "var"}
    raw_leaf = {(slot[1], slot[2]): k for k, slot in enumerate(sig.leaf_slots) if slot[0] == "raw"}

    sets: list[tuple] = []
    set_consts: list[tuple] = []
    leaf_plans: list[tuple] = []
    for path, source in zip(post.paths, post.sources, strict=False):
        variable = source.variable
        if variable is not None:
            input_index = inner_index.get(id(variable))
            k = var_leaf.get(input_index) if input_index is not None else None
            value = variable.raw_value
        else:
            parent = inner_index.get(id(source.parent))
            k = raw_leaf.get((parent, source.key)) if parent is not None else None
            value = source.value
        if k is not None:
            where = None
            if value is not inner.in_values[k]:
                where = place(grouping.input_group(k), value)
                if where[0] == "const":
                    set_consts.append((k, value))
                else:
                    sets.append((k, where[1], where[2]))
            leaf_plans.append(("keep", k, where))
            continue
        leaf = variable if variable is not None else VariableState(source.leaf_type, value)
        if path[0] == 0:
            group = grouping.new_input_group(path[1], path[2:], leaf)  # type: ignore[arg-type]
        else:
            group = grouping.output_group(root_specs[path[1]], path[2:], leaf)  # type: ignore[index]
        meta = meta_of(variable) if variable is not None else None
        leaf_plans.append(("new", place(group, value), meta))

    inputs_before = sig.graphdef.root.child(0)
    inputs_unchanged = post.graphdef.root.child(0) == inputs_before and all(
        post_objects.get(index) is inner.built[index] for index in indices_under(inputs_before)
    )
    graph = None
    if not inputs_unchanged or out_roots:
        graph = (post.graphdef, node_map, tuple(leaf_plans), inputs_unchanged)

    direct = None
    out_plan = None
    if grouping.direct_ok and not out_roots and all(map(_is_jax_value, out_leaves)):
        direct = out
    else:
        if specs is None:
            specs = grouping.output_specs(out, out_treedef)
        plans = []
        root_position = 0
        for leaf, spec in zip(out_leaves, specs, strict=True):
            if is_graph_leaf(leaf):
                plans.append(("graph", root_position))
                root_position += 1
            else:
                plans.append(place(grouping.output_group(spec, (), leaf), leaf))
        out_plan = (out_treedef, tuple(plans))
    return groups, direct, OutPlan(tuple(sets), tuple(set_consts), graph, out_plan)


def _is_jax_value(value: object) -> bool:
    return isinstance(value, jax.Array | np.ndarray | np.generic) or value is None


# Back outside ---------------------------------------------------------------------------


def apply(plan: CallPlan, out_plan: OutPlan, groups: Sequence[Sequence], direct: object) -> Any:
    """Write the updates into the caller's graph and build the caller's output."""
    for k, group, position in out_plan.sets:
        plan.write(k, groups[group][position])
    for k, value in out_plan.set_consts:
        plan.write(k, value)
    out_roots: tuple = ()
    if out_plan.graph is not None:
        out_roots = _Reconciler(plan, out_plan.graph, groups).run()
    if out_plan.out is None:
        return direct
    treedef, plans = out_plan.out
    leaves = [
        out_roots[p[1]] if p[0] == "graph" else groups[p[1]][p[2]] if p[0] == "group" else p[1]
        for p in plans
    ]
    return treedef.unflatten(leaves)


def _value_of(where: tuple, groups: Sequence[Sequence]) -> object:
    return groups[where[1]][where[2]] if where[0] == "group" else where[1]


class _Reconciler:
    """Bring the caller's graph to the structure the function left, reusing its objects.

    Nodes and Variables that existed before the call are the caller's own objects (their
    values were written already); new ones are built. Mutable nodes whose children
    changed get them set or removed in place, which reports the structural change.
    """

    def __init__(self, plan: CallPlan, graph: tuple, groups: Sequence[Sequence]) -> None:
        self.plan = plan
        self.graphdef, self.node_map, self.leaf_plans, self.inputs_unchanged = graph
        self.groups = groups
        self.registry = node_types()
        self.built: dict[int, object] = {}
        self.leaf = 0

    def run(self) -> tuple:
        in_entry, out_entry = self.graphdef.root.child(0), self.graphdef.root.child(1)
        if self.inputs_unchanged:
            self.built.update(self.plan.objects)
            self.leaf = len(self.plan.sig.paths)
        else:
            self.build(in_entry)
        return self.build(out_entry)  # type: ignore[return-value]

    def next_leaf(self) -> tuple:
        leaf_plan = self.leaf_plans[self.leaf]
        self.leaf += 1
        return leaf_plan

    def leaf_value(self, leaf_plan: tuple) -> object:
        if leaf_plan[0] == "keep":
            source = self.plan.sources[leaf_plan[1]]
            if source.variable is not None:
                return source.variable
            changed = leaf_plan[2]
            return source.value if changed is None else _value_of(changed, self.groups)
        return _value_of(leaf_plan[1], self.groups)

    def build(self, entry: Entry) -> object:
        if isinstance(entry, RefEntry):
            return self.built[entry.index]
        if isinstance(entry, StaticEntry):
            return unwrap(entry.value)
        if isinstance(entry, VariableEntry):
            leaf_plan = self.next_leaf()
            if leaf_plan[0] == "keep":
                variable = self.leaf_value(leaf_plan)
            else:
                meta = leaf_plan[2]
                variable = meta.type.from_metadata(self.leaf_value(leaf_plan), meta.metadata)
            self.built[entry.index] = variable
            return variable
        if isinstance(entry, LeafEntry):
            return self.leaf_value(self.next_leaf())
        return self.build_node(entry)

    def build_node(self, entry: NodeEntry) -> object:
        cls, index, aux, children = entry.type, entry.index, entry.aux, entry.children
        node_type = self.registry.lookup(cls)
        source = self.node_map.get(index)
        if source is not None:
            node = self.plan.objects[source]
            self.built[index] = node
            built = [(key, self.build(child)) for key, child in children]
            if node_type.create is not None:  # type: ignore[union-attr]
                _set_children(node, node_type, built)  # type: ignore[arg-type]
            return node
        if node_type.create is not None:  # type: ignore[union-attr]
            node = node_type.create(cls, aux)  # type: ignore[union-attr]
            self.built[index] = node
            init_key = node_type.init_key or node_type.set_key  # type: ignore[union-attr]
            for key, child in children:
                init_key(node, key, self.build(child))
            return node
        built = [(key, self.build(child)) for key, child in children]
        node = node_type.unflatten(cls, aux, built)  # type: ignore[union-attr]
        self.built[index] = node
        return node


def _same(a: object, b: object) -> bool:
    if a is b:
        return True
    if type(a) is not type(b) or isinstance(a, Variable) or is_array_value(a):
        return False
    try:
        return bool(a == b)
    except Exception:
        return False


def _set_children(node: object, node_type: NodeType, children: list[tuple]) -> None:
    if isinstance(node, list):  # a tracked List: keys are positions
        _set_items(node, [child for _, child in children])
        return
    current = dict(node_type.flatten(node)[0])
    for key, child in children:
        if key not in current or not _same(current[key], child):
            node_type.set_key(node, key, child)  # type: ignore[misc]
    new_keys = {key for key, _ in children}
    removed = [key for key in current if key not in new_keys]
    for key in removed:
        if node_type.pop_key is None:
            raise GraphError(
                f"the transformed function removed {key!r} from a "
                f"{type(node).__name__}, which cannot drop children in place."
            )
        node_type.pop_key(node, key)
    if removed:
        structure_changed()


def _set_items(node: list, values: list) -> None:
    if len(node) > len(values):
        del node[len(values) :]
    for position, value in enumerate(values):
        if position == len(node):
            node.append(value)
        elif not _same(node[position], value):
            node[position] = value


# One call, for transforms that trace per call (vmap, grad, remat) ----------------------


def lifted_call(
    plan: CallPlan,
    arrays: list,
    transform: Callable[[Callable], Callable],
    f: Callable,
    grouping: Grouping,
) -> Any:
    """Run `f` under `transform` of the pure function of `plan`, then apply the updates.

    `transform(pure)` returns a function of `(var_values, raw_values, arrays)`; `pure`
    returns `(groups, direct, Static(OutPlan))`.
    """
    sig = plan.sig

    def pure(var_values: list, raw_values: list, arrays: list) -> tuple:
        args, kwargs, inner = rebuild(sig, join_leaves(sig, var_values, raw_values), arrays)
        groups, direct, out_plan = collect(inner, f(*args, **kwargs), grouping)
        return groups, direct, Static(out_plan)

    var_values, raw_values = plan.values()
    groups, direct, static = transform(pure)(var_values, raw_values, arrays)
    return apply(plan, static.value, groups, direct)


# The axis vocabulary, for transforms built in other packages (`bryo_scan.lifted_scan`).
from ._transforms_axes import (  # noqa: E402
    AxisGrouping,
    Carry,
    StateAxes,
    arg_specs,
    check_axis,
    check_sizes,
    is_axis_leaf,
    leaf_axes,
    sorted_axes,
    state_leaf,
)

__all__ = [
    "ARRAY",
    "ROOT",
    "AxisGrouping",
    "CallPlan",
    "Carry",
    "Grouping",
    "Inner",
    "Meta",
    "OutPlan",
    "PlanCache",
    "Signature",
    "StateAxes",
    "Static",
    "TransformError",
    "apply",
    "arg_specs",
    "check_axis",
    "check_sizes",
    "collect",
    "hashable",
    "index_objects",
    "is_array_value",
    "is_axis_leaf",
    "is_graph_leaf",
    "join_leaves",
    "leaf_axes",
    "lifted_call",
    "rebuild",
    "scan_args",
    "sorted_axes",
    "state_leaf",
    "unwrap",
]
