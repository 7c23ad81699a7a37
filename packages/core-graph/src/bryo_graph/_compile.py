"""Compile a GraphDef into a Python function that rebuilds its graph from a leaf list.

A GraphDef that `merge` has built many times (a training loop merging once per step) is
translated into straight-line Python source — one statement per node, Variable and
child — and compiled with `exec`, the way `dataclasses` builds `__init__` methods. The
function takes the State's leaves in GraphDef order and returns the new root; it is
cached on the GraphDef and rebuilt only when the registered node types change. It runs
about twice as fast as the walk of `_build`, but generating and compiling it costs as
much as dozens of walks, so `GraphDef.build` compiles only GraphDefs that proved hot.
"""

from __future__ import annotations

from collections.abc import Callable

from bryo_plugins import TypeTable
from bryo_pytree import Path, unwrap_hashable

from ._build import cycle_through_immutable, leaf_value, unknown_node_type
from ._compat import current_trace
from ._entries import Entry, LeafEntry, NodeEntry, RefEntry, StaticEntry, VariableEntry
from ._object import OWNER, STATUSES, object_create, object_init_items
from ._variables import NO_METADATA, Variable, store

_new = object.__new__


class _Compiler:
    def __init__(self, registry: TypeTable) -> None:
        self.registry = registry
        self.lines: list[str] = []
        self.consts: list[object] = []
        self.const_index: dict[int, int] = {}
        self.leaf_count = 0
        self.in_progress: set[int] = set()
        self.built: set[int] = set()

    def const(self, value: object) -> str:
        index = self.const_index.get(id(value))
        if index is None:
            index = self.const_index[id(value)] = len(self.consts)
            self.consts.append(value)
        return f"K[{index}]"

    def key(self, key: object) -> str:
        return repr(key) if type(key) in (str, int) else self.const(key)

    def expr(self, entry: Entry, path: Path) -> str:
        if type(entry) is VariableEntry:
            i, name = self.leaf_count, f"n{entry.index}"
            self.leaf_count += 1
            # A Variable (the common case) goes into the graph as it is, as in Flax NNX
            # 0.12's merge; a raw value gets a new Variable of the entry's class.
            self.lines += [
                f"{name} = L[{i}]",
                f"if not isinstance({name}, Variable):",
                f"    {name} = new({self.const(entry.type)}); store({name}, L[{i}], NO_METADATA)",
            ]
            self.built.add(entry.index)
            return name
        if type(entry) is LeafEntry:
            i = self.leaf_count
            self.leaf_count += 1
            if entry.index is None:
                return f"leaf_value(L[{i}])"
            name = f"n{entry.index}"  # a raw ref: later references share it
            self.lines.append(f"{name} = leaf_value(L[{i}])")
            self.built.add(entry.index)
            return name
        if type(entry) is RefEntry:
            if entry.index not in self.built:
                raise cycle_through_immutable(path)
            return f"n{entry.index}"
        if type(entry) is StaticEntry:
            return self.const(unwrap_hashable(entry.value))
        return self.node_expr(entry, path)

    def node_expr(self, entry: NodeEntry, path: Path) -> str:
        cls, index, aux, children = entry.type, entry.index, entry.aux, entry.children
        node_type = self.registry.lookup(cls)
        if node_type is None:
            raise unknown_node_type(cls, path)
        name = f"n{index}"
        if node_type.create is object_create and node_type.init_items is object_init_items:
            # `Object`s (NNX-style modules): inline what those two functions do.
            self.lines.append(f"{name} = new({self.const(cls)})")
            restore = getattr(cls, "_object__restore", None)
            if restore is not None:  # bookkeeping an Object refreshes when built
                self.lines.append(f"{self.const(restore)}({name})")
            self.built.add(index)
            values = [(self.key(key), self.expr(child, (*path, key))) for key, child in children]
            values.insert(0, (repr(OWNER), "T"))  # the trace it is made in: this merge's
            if aux:  # its explicit data/static statuses (`restore_statuses`), a dict of its own
                values.insert(1, (repr(STATUSES), f"dict({self.const(aux)})"))
            items = ", ".join(f"{k}: {v}" for k, v in values)
            self.lines.append(f"{name}.__dict__.update({{{items}}})")
            return name
        if node_type.create is not None:
            self.lines.append(
                f"{name} = {self.const(node_type.create)}({self.const(cls)}, {self.const(aux)})"
            )
            self.built.add(index)
            if node_type.init_items is not None:
                values = [
                    (self.key(key), self.expr(child, (*path, key))) for key, child in children
                ]
                pairs = ", ".join(f"({k}, {v})" for k, v in values)
                self.lines.append(f"{self.const(node_type.init_items)}({name}, [{pairs}])")
                return name
            init_key = self.const(node_type.init_key or node_type.set_key)
            for key, child in children:
                value = self.expr(child, (*path, key))
                self.lines.append(f"{init_key}({name}, {self.key(key)}, {value})")
            return name
        self.in_progress.add(index)
        values = [(self.key(key), self.expr(child, (*path, key))) for key, child in children]
        pairs = ", ".join(f"({k}, {v})" for k, v in values)
        self.lines.append(
            f"{name} = {self.const(node_type.unflatten)}({self.const(cls)}, "
            f"{self.const(aux)}, [{pairs}])"
        )
        self.built.add(index)
        return name


def compile_graphdef(root: Entry, registry: TypeTable, *, name: str) -> Callable:
    """A function `build(leaves) -> (graph, objects)` for the GraphDef `root` (leaves in
    GraphDef order); `name` is the file name its tracebacks show. `objects` holds the
    nodes and Variables the build made or put in, in the order of their GraphDef indices,
    with None for the root (the graph itself: a graph that held the tuple would hold
    itself); its position is an object's index when the indices are 0, 1, 2, ... (as in
    every GraphDef a flattening made)."""
    compiler = _Compiler(registry)
    result = compiler.expr(root, ())
    body = "\n".join(f"    {line}" for line in compiler.lines) or "    pass"
    root_index = root.index if type(root) is NodeEntry else None
    names = [f"n{i}" if i != root_index else "None" for i in sorted(compiler.built)]
    objects = f"({', '.join(names)},)" if names else "()"
    source = f"def build(L):\n    T = current_trace()\n{body}\n    return {result}, {objects}\n"
    namespace = {
        "K": compiler.consts,
        "current_trace": current_trace,
        "leaf_value": leaf_value,
        "Variable": Variable,
        "NO_METADATA": NO_METADATA,
        "new": _new,
        "store": store,
    }
    exec(compile(source, name, "exec"), namespace)
    return namespace["build"]
