"""Stage 1 of a lifted call: how the arguments are laid out around graphs and arrays.

An argument's leaves are of three kinds: arrays (traced by the JAX transform), graph
roots (modules of any backend, `Rngs`, Variables: flattened together into one graph so
references shared across arguments stay shared) and static values. `scan_args`
describes each argument by a hashable layout record, collecting its roots and arrays on
the way:

- `ARRAY` / `ROOT` (`LeafLayout`): the argument is one array / one graph root;
- `StaticLayout(value)`: the argument is a static value;
- `TreeLayout(treedef, kinds)`: a container (dict, list, tuple, any pytree) whose leaves
  are `ARRAY`, `ROOT` or `StaticLayout`s.

Each layout's `rebuild` puts an argument back together from new roots and arrays: the
transforms rebuild their inputs inside the trace, the graph-level `scan` its carry and
`grad` its gradients (static leaves becoming None) with the same method.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from typing import Any, NamedTuple, TypeAlias

import jax

from bryo_graph import NodeType, Variable, flat_graph, node_types
from bryo_plugins import TypeTable
from bryo_pytree import hashable, is_array_like, unwrap_hashable

CONTAINERS = (dict, list, tuple)  # pytrees at the top level, graph nodes only inside graphs


def is_graph_leaf(value: object) -> bool:
    """Whether a transform treats `value` as a graph (not a pytree) at the top level."""
    if isinstance(value, Variable):
        return True
    node_type = node_types().lookup(type(value))
    return node_type is not None and node_type.type not in CONTAINERS


class LeafLayout(NamedTuple):
    """An argument, or a leaf of one, that is an array (`ARRAY`) or a graph root (`ROOT`)."""

    kind: str

    def rebuild(
        self, roots: Iterator[object], arrays: Iterator[object], *, statics: bool = True
    ) -> object:
        """The next array or the next root."""
        return next(arrays) if self.kind == "array" else next(roots)

    @property
    def leaf_kinds(self) -> tuple[LeafLayout]:
        return (self,)


ARRAY = LeafLayout("array")
ROOT = LeafLayout("root")


class StaticLayout(NamedTuple):
    """A static argument or leaf (`value` wrapped by `bryo_pytree.hashable`)."""

    value: Hashable
    kind: str = "static"

    def rebuild(
        self, roots: Iterator[object], arrays: Iterator[object], *, statics: bool = True
    ) -> object:
        """The static value, or None with `statics=False`."""
        return unwrap_hashable(self.value) if statics else None

    @property
    def leaf_kinds(self) -> tuple[()]:
        return ()


class TreeLayout(NamedTuple):
    """A container argument: its treedef and the layout of each of its leaves."""

    treedef: Any
    kinds: tuple[LeafLayout | StaticLayout, ...]
    kind: str = "tree"

    def rebuild(
        self, roots: Iterator[object], arrays: Iterator[object], *, statics: bool = True
    ) -> object:
        """The container with its leaves rebuilt in order."""
        leaves = [kind.rebuild(roots, arrays, statics=statics) for kind in self.kinds]
        return self.treedef.unflatten(leaves)

    @property
    def leaf_kinds(self) -> tuple[LeafLayout | StaticLayout, ...]:
        return self.kinds


ArgLayout: TypeAlias = LeafLayout | StaticLayout | TreeLayout
"""`rebuild(roots, arrays, statics=True)` rebuilds the argument; `leaf_kinds` lists the
layouts of its leaves (itself for ARRAY/ROOT, none for a static value)."""


class CallKey(NamedTuple):
    """What identifies a call's plan: the layouts and the roots' flattenings.

    Attributes:
        layouts: one `ArgLayout` per positional argument.
        kw_layouts: `(name, ArgLayout)` per keyword argument, sorted by name.
        graphs: per root, its cached `FlatGraph` (the same object while the root's
            structure is unchanged), or the Variable itself.
    """

    layouts: tuple[ArgLayout, ...]
    kw_layouts: tuple[tuple[str, ArgLayout], ...]
    graphs: tuple[object, ...]


def _leaf_kind(value: object, registry: TypeTable[NodeType]) -> LeafLayout | None:
    """ARRAY, ROOT or None (a container or a static value). Node types come from the
    registry's table (rebuilt per plugin-manager epoch); the rest are type checks."""
    if isinstance(value, Variable):
        return ROOT
    if is_array_like(value):
        return ARRAY
    node_type = registry.lookup(type(value))
    return ROOT if node_type is not None and node_type.type not in CONTAINERS else None


def _layout(value: object, registry: TypeTable[NodeType], roots: list, arrays: list) -> ArgLayout:
    kind = _leaf_kind(value, registry)
    if kind is ARRAY:
        arrays.append(value)
        return ARRAY
    if kind is ROOT:
        roots.append(value)
        return ROOT
    leaves, treedef = jax.tree_util.tree_flatten(value, is_leaf=is_graph_leaf)
    if treedef.num_leaves == 1 and treedef.num_nodes == 1:
        return StaticLayout(hashable(value))
    kinds: list[LeafLayout | StaticLayout] = []
    for leaf in leaves:
        kind = _leaf_kind(leaf, registry)
        if kind is ARRAY:
            arrays.append(leaf)
        elif kind is ROOT:
            roots.append(leaf)
        kinds.append(kind if kind is not None else StaticLayout(hashable(leaf)))
    return TreeLayout(treedef, tuple(kinds))


def _identity(root: object) -> object:
    """What keys a root in the plan cache: its cached flattening, or the Variable itself."""
    return root if isinstance(root, Variable) else flat_graph(root)


def scan_args(
    args: Sequence[object], kwargs: dict[str, object], static: frozenset[int | str] = frozenset()
) -> tuple[CallKey, list, list]:
    """`(key, roots, arrays)` of a call; `static` names arguments to keep static."""
    registry = node_types()
    roots: list = []
    arrays: list = []
    layouts = tuple(
        StaticLayout(hashable(arg)) if position in static else _layout(arg, registry, roots, arrays)
        for position, arg in enumerate(args)
    )
    kw_layouts = tuple(
        (
            name,
            StaticLayout(hashable(kwargs[name]))
            if name in static
            else _layout(kwargs[name], registry, roots, arrays),
        )
        for name in sorted(kwargs)
    )
    return CallKey(layouts, kw_layouts, tuple(map(_identity, roots))), roots, arrays
