"""Stage 5 of a lifted call: back outside, write the changes into the caller's objects.

`apply` writes updated values into the caller's Variables and raw leaves, brings the
caller's graphs to the structure the function left (reusing the caller's own nodes and
Variables, building new ones) when the `OutPlan` says it changed, and builds the
caller's output.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import jax

from bryo_graph import (
    Entry,
    GraphError,
    LeafEntry,
    NodeEntry,
    NodeType,
    RefEntry,
    StaticEntry,
    Variable,
    VariableEntry,
    node_types,
    structure_changed,
)
from bryo_pytree import is_array_like, run_frames, safe_equal, unwrap_hashable

from ._collect import GraphPlan, KeptLeaf, LeafPlan, OutPlan
from ._plan import CallPlan, pair_side


def apply(
    plan: CallPlan,
    out_plan: OutPlan,
    groups: Sequence[Sequence],
    direct: object,
    name: str = "transform",
) -> Any:
    """Write the updates into the caller's graph and build the caller's output (atomically,
    checked against other threads' updates: see `CallPlan.writing`; `name` is the
    transform's, for the error)."""
    written = [u.k for u in out_plan.sets] + [u.k for u in out_plan.set_consts]
    with plan.writing(written, name):
        return _apply(plan, out_plan, groups, direct)


def _apply(plan: CallPlan, out_plan: OutPlan, groups: Sequence[Sequence], direct: object) -> Any:
    for update in out_plan.sets:
        plan.write(update.k, groups[update.group][update.position])
    for update in out_plan.set_consts:
        plan.write(update.k, update.resolved(groups))
    out_roots: tuple = ()
    if out_plan.graph is not None:
        out_roots = _Reconciler(plan, out_plan.graph, groups).run()
    if out_plan.out is None:
        return direct
    leaves = [leaf.resolve(groups, out_roots) for leaf in out_plan.out.leaves]
    return out_plan.out.treedef.unflatten(leaves)


class _Reconciler:
    """Bring the caller's graph to the structure the function left, reusing its objects.

    Nodes and Variables that existed before the call are the caller's own objects (their
    values were written already); new ones are built. Mutable nodes whose children
    changed get them set or removed in place, which reports the structural change.
    """

    def __init__(self, plan: CallPlan, graph: GraphPlan, groups: Sequence[Sequence]) -> None:
        self.plan = plan
        self.graph = graph
        self.groups = groups
        self.registry = node_types()
        self.built: dict[int, object] = {}
        self.leaf = 0

    def run(self) -> tuple:
        graphdef = self.graph.graphdef
        if self.graph.inputs_unchanged:
            self.built.update(self.plan.objects)
            self.leaf = len(self.plan.sig.paths)
        else:
            self.build(pair_side(graphdef, 0))
        return self.build(pair_side(graphdef, 1))  # type: ignore[return-value]  # the pair graphdef builds the (inputs, outputs) tuple

    def next_leaf(self) -> LeafPlan:
        leaf_plan = self.graph.leaf_plans[self.leaf]
        self.leaf += 1
        return leaf_plan

    def leaf_value(self, leaf_plan: LeafPlan) -> object:
        if isinstance(leaf_plan, KeptLeaf):
            source = self.plan.sources[leaf_plan.k]
            if source.variable is not None:
                return source.variable
            changed = leaf_plan.changed
            return source.value if changed is None else changed.resolve(self.groups, ())
        value = leaf_plan.place.resolve(self.groups, ())
        return jax.new_ref(value) if leaf_plan.ref else value

    def build(self, entry: Entry) -> object:
        """The object for `entry`, its nodes built with an explicit stack of `build_node`
        generators (each yields a child's entry and receives the child): any depth."""
        if not isinstance(entry, NodeEntry):
            return self.build_leaf(entry)
        return run_frames(
            self.build_node(entry), self.build_node, frame_type=NodeEntry, resolve=self.build_leaf
        )

    def build_leaf(self, entry: Entry) -> object:
        if isinstance(entry, RefEntry):
            return self.built[entry.index]
        if isinstance(entry, StaticEntry):
            return unwrap_hashable(entry.value)
        if isinstance(entry, VariableEntry):
            leaf_plan = self.next_leaf()
            if isinstance(leaf_plan, KeptLeaf):
                variable = self.leaf_value(leaf_plan)
            else:
                meta = leaf_plan.meta
                variable = meta.type.from_metadata(self.leaf_value(leaf_plan), meta.metadata)  # type: ignore[union-attr]  # a leaf that is not KeptLeaf carries its Variable's meta
            self.built[entry.index] = variable
            return variable
        assert isinstance(entry, LeafEntry)
        value = self.leaf_value(self.next_leaf())
        if entry.index is not None:  # a raw ref: later references share it
            self.built[entry.index] = value
        return value

    def build_node(self, entry: NodeEntry) -> Generator[Entry, object, object]:
        node_type = self.registry.lookup(entry.type)
        assert node_type is not None  # the entry came from flattening a live node
        source = self.graph.node_map.get(entry.index)
        if source is not None:
            node = self.plan.objects[source]
            self.built[entry.index] = node
            built = []
            for key, child in entry.children:
                built.append((key, (yield child)))
            if node_type.set_aux is not None:
                node_type.set_aux(node, entry.aux)
            if node_type.create is not None:
                _set_children(node, node_type, built)
            return node
        if node_type.create is not None:
            node = node_type.create(entry.type, entry.aux)
            self.built[entry.index] = node
            init_key = node_type.init_key or node_type.set_key
            for key, child in entry.children:
                init_key(node, key, (yield child))  # type: ignore[misc]  # mutable node types (with `create`) define init_key or set_key
            return node
        built = []
        for key, child in entry.children:
            built.append((key, (yield child)))
        node = node_type.unflatten(entry.type, entry.aux, built)  # type: ignore[misc]  # immutable node types (no `create`) define unflatten
        self.built[entry.index] = node
        return node


def _same(a: object, b: object) -> bool:
    """Whether a child the function left is the one the node holds (no write needed):
    the same object, or an equal static value of the same type (never an array)."""
    if a is b:
        return True
    if type(a) is not type(b) or isinstance(a, Variable) or is_array_like(a):
        return False
    return safe_equal(a, b)


def _set_children(node: object, node_type: NodeType, children: list[tuple]) -> None:
    if isinstance(node, list):  # a tracked List: keys are positions
        _set_items(node, [child for _, child in children])
        return
    current = dict(node_type.flatten(node)[0])
    for key, child in children:
        if key not in current or not _same(current[key], child):
            node_type.set_key(node, key, child)  # type: ignore[misc]  # only mutable node types (with `create`) get here: they define set_key
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
        structure_changed(node)


def _set_items(node: list, values: list) -> None:
    if len(node) > len(values):
        del node[len(values) :]
    for position, value in enumerate(values):
        if position == len(node):
            node.append(value)
        elif not _same(node[position], value):
            node[position] = value
