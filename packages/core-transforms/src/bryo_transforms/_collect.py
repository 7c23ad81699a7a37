"""Stage 4 of a lifted call: after the user's function, what changed and where it goes.

`collect` flattens the rebuilt inputs together with the graphs the function returned
and compares them with what `rebuild` built: a State leaf whose value is not the traced
input any more is an update, a node or Variable that was not built is new. Arrays leave
the transform in *groups* (one per output axis for `vmap`, as a `Grouping` decides); the
rest goes into a static `OutPlan` of small records that says where each value goes, for
`apply` (stage 5) to write back outside.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, NamedTuple, TypeAlias, TypeVar

import jax

from bryo_graph import (
    Entry,
    GraphDef,
    NodeEntry,
    VariableEntry,
    VariableMeta,
    flat_graph,
    is_array_ref,
    made_in_another_trace,
)
from bryo_pytree import Path, is_array, path_str

from ._layout import is_graph_leaf
from ._plan import IN_PLACE_CONTAINERS, PairPath, index_objects, meta_of, pair_side
from ._rebuild import Inner

V = TypeVar("V")


class Static(Generic[V]):
    """A pytree with no leaves carrying `value`: static data out of a JAX transform.

    JAX rebuilds it from the output tree of the trace that made it, so each compiled
    version of a function returns its own plan.
    """

    __slots__ = ("value",)

    def __init__(self, value: V) -> None:
        self.value = value


jax.tree_util.register_pytree_node(Static, lambda s: ((), s.value), lambda value, _: Static(value))


# Where one value went ---------------------------------------------------------------------


class InGroup(NamedTuple):
    """An array that left the transform as `groups[group][position]`."""

    group: int
    position: int

    def resolve(self, groups: Sequence[Sequence], out_roots: Sequence) -> object:
        return groups[self.group][self.position]


class Const(NamedTuple):
    """A Python value (not an array) the function produced, kept in the plan itself."""

    value: object

    def resolve(self, groups: Sequence[Sequence], out_roots: Sequence) -> object:
        return self.value


class OutRoot(NamedTuple):
    """An output leaf that is a graph: the `position`-th graph the function returned."""

    position: int

    def resolve(self, groups: Sequence[Sequence], out_roots: Sequence) -> object:
        return out_roots[self.position]


class InTree(NamedTuple):
    """A pytree holding arrays (a Variable's tuple of sown values): its structure, and the
    place of each of its leaves."""

    treedef: Any
    leaves: tuple[InGroup | Const, ...]

    def resolve(self, groups: Sequence[Sequence], out_roots: Sequence) -> object:
        return self.treedef.unflatten([leaf.resolve(groups, out_roots) for leaf in self.leaves])


Place: TypeAlias = InGroup | Const | InTree
OutLeaf: TypeAlias = InGroup | Const | InTree | OutRoot


# What happened to each leaf of the graphs after the call -----------------------------------


class KeptLeaf(NamedTuple):
    """A leaf that was input State leaf `k`; `changed` places its new value, or None."""

    k: int
    changed: Place | None


class NewLeaf(NamedTuple):
    """A leaf the function created: its value's place, its Variable's meta (or None for a
    raw array), and whether it was a JAX mutable array made inside (it leaves as its
    value, which becomes a new ref outside, as Flax's `ArrayRefOutput`)."""

    place: Place
    meta: VariableMeta | None
    ref: bool = False


LeafPlan: TypeAlias = KeptLeaf | NewLeaf


class Update(NamedTuple):
    """Input State leaf `k` takes the array `groups[group][position]`."""

    k: int
    group: int
    position: int


class ConstUpdate(NamedTuple):
    """Input State leaf `k` takes the Python value `value` (or, for an `InTree`, the
    pytree of arrays it places)."""

    k: int
    value: object

    def resolved(self, groups: Sequence[Sequence]) -> object:
        """The value to write, its arrays taken from `groups`."""
        return self.value.resolve(groups, ()) if isinstance(self.value, InTree) else self.value


class GraphPlan(NamedTuple):
    """The graphs after the call, when they are not just the inputs with new values.

    Attributes:
        graphdef: the GraphDef of `(input roots, output roots)` after the call.
        node_map: its GraphDef index -> the input GraphDef index of the same object.
        leaf_plans: one `KeptLeaf` or `NewLeaf` per State leaf of `graphdef`.
        inputs_unchanged: the inputs kept their structure (only graphs were returned).
    """

    graphdef: GraphDef
    node_map: dict[int, int]
    leaf_plans: tuple[LeafPlan, ...]
    inputs_unchanged: bool


class OutputPlan(NamedTuple):
    """How to build the caller's output: its treedef and one `OutLeaf` per leaf."""

    treedef: Any
    leaves: tuple[OutLeaf, ...]


class OutPlan:
    """What left a transform and where it goes (static; built once per trace).

    Attributes:
        sets: `Update`s of the inputs' State leaves with arrays.
        set_consts: `ConstUpdate`s of the inputs' State leaves with Python values.
        graph: None when the inputs kept their structure and no graph is returned, else
            the `GraphPlan` that `apply` reconciles the caller's graphs with.
        out: None when the output left the transform as it is, else its `OutputPlan`.
    """

    __slots__ = ("graph", "out", "set_consts", "sets")

    def __init__(
        self,
        sets: tuple[Update, ...],
        set_consts: tuple[ConstUpdate, ...],
        graph: GraphPlan | None,
        out: OutputPlan | None,
    ) -> None:
        self.sets = sets
        self.set_consts = set_consts
        self.graph = graph
        self.out = out


class Grouping:
    """Where values leave a transform: one group per output axis (`vmap`), or one group.

    Subclasses say which group an updated input leaf, a new leaf of an input graph, and
    an output leaf go to. The base class puts everything in group 0.
    """

    n_groups = 1
    direct_ok = True  # plain array outputs may leave the transform as they are

    def input_group(self, k: int) -> int:
        return 0

    def always_returned(self, k: int) -> bool:
        """Whether input State leaf `k` leaves the transform even when unchanged (its
        buffer was donated, so the caller needs it back)."""
        return False

    def new_input_group(self, root: int, path: Path, leaf: object) -> int:
        return 0

    def output_group(self, spec: object, path: Path, leaf: object) -> int:
        return 0

    def output_specs(self, out: object, treedef: Any) -> list:
        """Per leaf of the output (graph leaves included), what `output_group` receives."""
        return [None] * treedef.num_leaves

    def check_returned(
        self, out_roots: list, root_specs: list, input_leaf: Callable[[object], int | None]
    ) -> None:
        """Raise if the output graphs (`out_roots`, with their `root_specs`) give an input
        Variable (`input_leaf(variable)`: its input State leaf, or None) another place than
        its input's; the base class has one place for everything."""


def _indices_under(entry: Entry) -> list[int]:
    """The GraphDef indices of the nodes and Variables under `entry`, itself included."""
    indices: list[int] = []
    stack = [entry]
    while stack:  # its own stack: a model of any depth
        entry = stack.pop()
        if isinstance(entry, VariableEntry | NodeEntry):
            indices.append(entry.index)
        if isinstance(entry, NodeEntry):
            stack.extend(child for _, child in entry.children)
    return indices


def _is_jax_value(value: object) -> bool:
    return is_array(value) or value is None


class _Collector:
    """One `collect`: the groups filled so far."""

    def __init__(self, n_groups: int) -> None:
        self.groups: list[list] = [[] for _ in range(n_groups)]

    def place(self, group: int, value: object) -> Place:
        if is_array(value):
            self.groups[group].append(value)
            return InGroup(group, len(self.groups[group]) - 1)
        leaves, treedef = jax.tree_util.tree_flatten(value)
        if treedef.num_nodes == 1 or not any(isinstance(v, jax.Array) for v in leaves):
            return Const(value)  # a Python value, or a pytree without traced arrays
        return InTree(treedef, tuple(self.place(group, leaf) for leaf in leaves))  # type: ignore[misc]  # place() on a leaf gives InGroup or Const, never InTree


def _captured_output(variable: object, where: PairPath) -> ValueError:
    """The error for a Variable the function returned that it reached through its closure."""
    inner = path_str(where.inner) if where.inner else "the root itself"
    return ValueError(
        "Cannot extract graph node from different trace level: the function returned a "
        f"{type(variable).__name__} (output graph {where.root}, at {inner}) that was made "
        "outside the transform and reached through the function's closure; the transform "
        "cannot hand it back. Pass the module holding it as an argument, or return a copy "
        "made inside (`nnx.clone(module)`)."
    )


def collect(inner: Inner, out: object, grouping: Grouping) -> tuple[list[list], object, OutPlan]:
    """After the user's function: `(groups, direct output or None, OutPlan)`."""
    sig = inner.sig
    collector = _Collector(grouping.n_groups)
    place = collector.place

    out_leaves, out_treedef = jax.tree_util.tree_flatten(out, is_leaf=is_graph_leaf)
    out_roots = [leaf for leaf in out_leaves if is_graph_leaf(leaf)]
    specs: list | None = None
    if out_roots or not grouping.direct_ok:
        specs = grouping.output_specs(out, out_treedef)
    root_specs = [
        spec for spec, leaf in zip(specs or (), out_leaves, strict=False) if is_graph_leaf(leaf)
    ]

    post_pair = (inner.roots, tuple(out_roots))
    post = flat_graph(post_pair)
    inner_index = {id(obj): index for index, obj in inner.built.items()}
    post_objects = index_objects(post.graphdef, post_pair)
    node_map = {
        index: inner_index[id(obj)] for index, obj in post_objects.items() if id(obj) in inner_index
    }
    if out_roots:

        def input_leaf(variable: object) -> int | None:
            index = inner_index.get(id(variable))
            return sig.leaf_of_variable.get(index) if index is not None else None

        grouping.check_returned(out_roots, root_specs, input_leaf)

    sets: list[Update] = []
    set_consts: list[ConstUpdate] = []
    leaf_plans: list[LeafPlan] = []
    for path, source in zip(post.paths, post.sources, strict=False):
        variable = source.variable
        if variable is not None:
            input_index = inner_index.get(id(variable))
            k = sig.leaf_of_variable.get(input_index) if input_index is not None else None
            value = variable.raw_value
        else:
            parent = inner_index.get(id(source.parent))
            k = sig.leaf_of_raw.get((parent, source.key)) if parent is not None else None
            value = source.value
        if k is not None:
            changed = None
            # a dict or list value may have been written in place (`v['a'] += 1`): its
            # identity says nothing, so it leaves the transform as changed (an empty one
            # holds nothing to write back: a scan carry would refuse it as a Python value)
            if (
                value is not inner.in_values[k]
                or (type(value) in IN_PLACE_CONTAINERS and value)
                or grouping.always_returned(k)
            ):
                changed = place(grouping.input_group(k), value)
                if isinstance(changed, Const):
                    set_consts.append(ConstUpdate(k, value))
                elif isinstance(changed, InTree):
                    set_consts.append(ConstUpdate(k, changed))
                else:
                    sets.append(Update(k, changed.group, changed.position))
            leaf_plans.append(KeptLeaf(k, changed))
            continue
        leaf = variable if variable is not None else source.as_variable(value)
        where = PairPath.of(path)
        if where.side == 0:
            group = grouping.new_input_group(where.root, where.inner, leaf)
        else:
            if variable is not None and made_in_another_trace(variable):
                raise _captured_output(variable, where)
            group = grouping.output_group(root_specs[where.root], where.inner, leaf)
        meta = meta_of(variable) if variable is not None else None
        if is_array_ref(value):  # a ref made inside cannot leave: its value does
            leaf_plans.append(NewLeaf(place(group, value[...]), meta, ref=True))  # type: ignore[index]  # a ref reads whole with [...]
        else:
            leaf_plans.append(NewLeaf(place(group, value), meta))

    inputs_before = pair_side(sig.graphdef, 0)
    # compared as GraphDefs: their `==` walks entries of any depth (tuples' stops at ~1000)
    same_structure = GraphDef(pair_side(post.graphdef, 0)) == GraphDef(inputs_before)
    inputs_unchanged = same_structure and all(
        post_objects.get(index) is inner.built[index] for index in _indices_under(inputs_before)
    )
    graph = None
    if not inputs_unchanged or out_roots:
        graph = GraphPlan(post.graphdef, node_map, tuple(leaf_plans), inputs_unchanged)

    direct = None
    out_plan = None
    if grouping.direct_ok and not out_roots and all(map(_is_jax_value, out_leaves)):
        direct = out
    else:
        if specs is None:
            specs = grouping.output_specs(out, out_treedef)
        plans: list[OutLeaf] = []
        n_roots = 0
        for leaf, spec in zip(out_leaves, specs, strict=True):
            if is_graph_leaf(leaf):
                plans.append(OutRoot(n_roots))
                n_roots += 1
            else:
                plans.append(place(grouping.output_group(spec, (), leaf), leaf))
        out_plan = OutputPlan(out_treedef, tuple(plans))
    groups = collector.groups
    return groups, direct, OutPlan(tuple(sets), tuple(set_consts), graph, out_plan)
