"""The axis vocabulary of the lifted transforms: `StateAxes`, `Carry`, and per-leaf axes.

`in_axes`/`out_axes` are prefixes of the arguments and outputs (as in `jax.vmap`); at a
graph node they may be a `StateAxes` that gives each part of the node's state its own
axis by filter. The functions here expand such prefixes to one axis per State leaf and
array, check the axes against the values, and name the argument and path when one does
not fit. `vmap` and the graph-level `scan` share them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import jax
import numpy as np
from jax.typing import ArrayLike

from bryo_filters import Filter, PathIn, filters_to_predicates
from bryo_graph import State, Variable, flat_graph
from bryo_pytree import Path, PrefixError, broadcast_prefix, is_array_like, keypath_to_path

from ._collect import Grouping
from ._errors import TransformError
from ._layout import ARRAY, ROOT, ArgLayout, LeafLayout, StaticLayout, is_graph_leaf
from ._plan import CallPlan, PairPath, Signature
from ._prefix_filters import filters_of


class Carry:
    """Marks the carry of a graph-level `scan`: an argument (`in_axes=(Carry, 0)`), the
    output (`out_axes=(Carry, 1)`), or the parts of a module's state threaded from step to
    step (`StateAxes({...: Carry})`). Used as the class itself, never instantiated.
    """

    def __init__(self) -> None:
        raise TypeError("`Carry` is a marker: write `Carry`, not `Carry()`.")


def is_int(value: object) -> bool:
    """Whether `value` is an int axis (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)


def path_filters(state: State, owner: str) -> list[tuple[Filter, object]]:
    """A State of per-leaf values (axes, shardings) as `(PathIn(*paths), value)` pairs, one
    pair per distinct value in first-seen order: how `StateAxes(state)` and
    `StateSharding(state)` read a State (as Flax's do)."""
    paths_of: dict[object, list[Path]] = {}
    for path, leaf in state.flat_state().items():
        value = leaf.get_value() if isinstance(leaf, Variable) else leaf
        try:
            paths_of.setdefault(value, []).append(path)
        except TypeError:
            raise TypeError(
                f"`{owner}` given a State needs hashable values; got {value!r} at "
                f"{'.'.join(map(str, path))}. Give it `{{filter: value}}` pairs instead."
            ) from None
    return [(PathIn(*paths), value) for value, paths in paths_of.items()]


class StateAxes:
    """Which axis each part of a graph node's state is mapped over: filter -> axis.

    Each Variable takes the axis of the first filter that matches it (order matters, as
    in `split`); an axis is an int, None (broadcast) or `Carry` (scan only).

    >>> from bryo_graph import Param
    >>> axes = StateAxes({(Param, 'dropout'): 0, ...: None})
    >>> axes.axes
    (0, None)

    Args:
        filter_axes: a mapping `{filter: axis}`, an iterable of `(filter, axis)` pairs,
            or a State holding each leaf's axis (its paths become `PathIn` filters).
    """

    __slots__ = ("_hash", "axes", "filters", "predicates")

    def __init__(
        self, filter_axes: State | Mapping[Filter, object] | Iterable[tuple[Filter, object]]
    ) -> None:
        if isinstance(filter_axes, State):
            items = path_filters(filter_axes, "StateAxes")
        else:
            items = list(filter_axes.items() if isinstance(filter_axes, Mapping) else filter_axes)
        for filter, axis in items:
            if not (axis is None or axis is Carry or is_int(axis)):
                raise TypeError(
                    f"`StateAxes` axes must be ints, None or `Carry`; got {axis!r} for the "
                    f"filter {filter!r}."
                )
        self.filters = tuple(f for f, _ in items)
        self.axes = tuple(a for _, a in items)
        self.predicates = filters_to_predicates(self.filters)
        self._hash = hash((tuple(map(_hashable_filter, self.filters)), self.axes))

    def axis_of(self, path: Path, leaf: object) -> object:
        """The axis of the first filter matching `(path, leaf)`, or raise `LookupError`."""
        for predicate, axis in zip(self.predicates, self.axes, strict=False):
            if predicate(path, leaf):
                return axis
        raise LookupError(path)

    def map_prefix(self, path: Path, variable: object) -> object:
        """The axis of `(path, variable)` (Flax's name): as `axis_of`, but a path no filter
        matches raises ValueError naming it."""
        try:
            return self.axis_of(tuple(path), variable)
        except LookupError:
            raise ValueError(
                f"{self!r} has no filter matching the path {'.'.join(map(str, path))}; end it "
                "with `...: None` to broadcast the rest."
            ) from None

    def items(self) -> list[tuple[Filter, object]]:
        """`(filter, axis)` pairs, in order."""
        return list(zip(self.filters, self.axes, strict=False))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StateAxes) and (
            self.predicates == other.predicates and self.axes == other.axes
        )

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        body = ", ".join(f"{filter_repr(f)}: {_axis_repr(a)}" for f, a in self.items())
        return f"StateAxes({{{body}}})"


def _hashable_filter(filter: object) -> object:
    try:
        hash(filter)
    except TypeError:
        return id(filter)
    return filter


def filter_repr(filter: object) -> str:
    """A filter as users write it (`...`, a class's name, else its repr)."""
    if filter is Ellipsis:
        return "..."
    if isinstance(filter, type):
        return filter.__name__
    return repr(filter)


def _axis_repr(axis: object) -> str:
    return "Carry" if axis is Carry else repr(axis)


# Axes: from an `in_axes`/`out_axes` prefix to one axis per leaf ---------------------------


class _Slot:
    """A stand-in leaf for broadcasting a prefix over an argument's layout."""

    __slots__ = ("kind",)

    def __init__(self, kind: LeafLayout | StaticLayout | None) -> None:
        self.kind = kind

    def __repr__(self) -> str:
        if self.kind is ROOT:
            return "<graph node>"
        return "<array>" if self.kind is ARRAY else "<static>"


def is_axis_leaf(value: object) -> bool:
    return value is None or value is Carry or isinstance(value, StateAxes | int)


def arg_specs(
    sig: Signature, in_axes: object, *, name: str = "in_axes", kwargs_axis: object = 0
) -> tuple[list, list]:
    """`(root specs, array specs)`: the axis spec of each graph root and array argument leaf.

    `in_axes` is an axis for every positional argument, or a tuple/list with one prefix
    per positional argument (as in `jax.vmap`); keyword arguments take `kwargs_axis`.
    """
    layouts = sig.layouts
    if is_axis_leaf(in_axes):
        per_arg = [in_axes] * len(layouts)
    elif isinstance(in_axes, tuple | list):
        if len(in_axes) != len(layouts):
            raise TransformError(
                f"`{name}` has {len(in_axes)} entries but the function was called with "
                f"{len(layouts)} positional arguments; give one entry per argument (None "
                "for arguments that are not mapped)."
            )
        per_arg = list(in_axes)
    else:
        raise TransformError(
            f"`{name}` must be an int, None, a StateAxes or a tuple with one entry per "
            f"argument; got {in_axes!r}."
        )
    root_specs: list = []
    array_specs: list = []
    named = [
        (f"{name}[{i}]", spec, layout)
        for i, (spec, layout) in enumerate(zip(per_arg, layouts, strict=True))
    ]
    named += [(f"{name} (keyword {kw!r})", kwargs_axis, layout) for kw, layout in sig.kw_layouts]
    for where, spec, layout in named:
        for kind, leaf_spec in _expand(spec, layout, where):
            if kind is ROOT:
                root_specs.append(leaf_spec)
            elif kind is ARRAY:
                if isinstance(leaf_spec, StateAxes):
                    raise TransformError(
                        f"`{where}` is a StateAxes but the argument there is an array, not a "
                        "graph node; use an int or None for arrays."
                    )
                array_specs.append(leaf_spec)
    return root_specs, array_specs


def _expand(spec: object, layout: ArgLayout, where: str) -> list[tuple[object, object]]:
    """`(leaf kind, axis spec)` per leaf of an argument, from the argument's prefix."""
    if isinstance(layout, LeafLayout):
        if layout is ROOT and not is_axis_leaf(spec) and is_graph_leaf(spec):
            spec = _module_prefix_axes(spec, where)
        if not is_axis_leaf(spec):
            raise TransformError(
                f"`{where}` must be an int, None or StateAxes for this argument (a single "
                f"{'graph node' if layout is ROOT else 'array'}); got {spec!r}."
            )
        return [(layout, spec)]
    if isinstance(layout, StaticLayout):
        return []
    specs = _broadcast(spec, layout.treedef, list(layout.kinds), where)
    return list(zip(layout.kinds, specs, strict=True))


def _module_prefix_axes(spec: object, where: str) -> StateAxes:
    """A module-shaped prefix (`prefix(model, {...})`: the model's pytree with an axis in
    place of each Variable) as the StateAxes giving each of its paths that axis, then
    (for a prefix `prefix` built from a `{filter: axis}` mapping) that mapping's pairs,
    which place the state the function adds."""
    flat, _ = jax.tree_util.tree_flatten_with_path(spec, is_leaf=lambda x: x is None)
    paths_of: dict[object, list[Path]] = {}
    for keypath, axis in flat:
        path = keypath_to_path(keypath)
        if not is_axis_leaf(axis) or isinstance(axis, StateAxes):
            raise TransformError(
                f"`{where}` is a module-shaped prefix, so it must hold an int, None or `Carry` "
                f"at each Variable; got {axis!r} at {'.'.join(map(str, path))}."
            )
        paths_of.setdefault(axis, []).append(path)
    later = [(f, a) for f, a in filters_of(spec) if a is None or a is Carry or is_int(a)]
    return StateAxes([*((PathIn(*paths), axis) for axis, paths in paths_of.items()), *later])


def state_leaf(plan: CallPlan, k: int) -> object:
    """State leaf `k` as filters see it: the Variable, or a VariableState for a raw array."""
    return plan.sources[k].as_variable()


def leaf_axes(plan: CallPlan, root_specs: list, name: str = "in_axes") -> list:
    """One axis per State leaf of `plan`, from its root's spec (StateAxes resolved)."""
    sig = plan.sig
    axes = []
    for k, path in enumerate(sig.paths):
        place = PairPath.of(path)
        spec = root_specs[place.root]
        if isinstance(spec, StateAxes):
            try:
                spec = spec.axis_of(place.inner, state_leaf(plan, k))
            except LookupError:
                raise TransformError(
                    f"`{name}`: {spec!r} has no filter matching {sig.describe_leaf(k)} "
                    f"({type(state_leaf(plan, k)).__name__}); add a filter for it, or end the "
                    "StateAxes with `...: None` to broadcast the rest."
                ) from None
        axes.append(spec)
    return axes


def _variables_of(root: object) -> list[tuple[Path, Variable]]:
    """`(path, Variable)` of every Variable of graph `root` (a bare Variable: path ())."""
    if isinstance(root, Variable):
        return [((), root)]
    flat = flat_graph(root)
    return [
        (path, s.variable)
        for path, s in zip(flat.paths, flat.sources, strict=True)
        if s.variable is not None
    ]


def check_consistent_aliasing(
    plan: CallPlan,
    root_specs: list,
    name: str = "in_axes",
    resolve: Callable[[object, Path, Variable], object] | None = None,
) -> None:
    """Raise if a Variable reached through several graph roots gets different axes from
    their specs (`vmap(in_axes=(0, 1))(m, m)`): one Variable has one axis. `resolve(spec,
    path, variable)` gives a Variable's axis from its root's spec (default: a StateAxes
    resolved, any other spec as it is)."""
    roots = plan.roots
    if len(roots) < 2:
        return
    reached: dict[int, list[tuple[str, object]]] = {}
    kinds: dict[int, str] = {}
    for j, (root, spec) in enumerate(zip(roots, root_specs, strict=True)):
        where = plan.sig.root_places[j].argument
        if isinstance(root, Variable):
            entries = [((), root)]
        else:
            flat = flat_graph(root)
            entries = [
                (path, s.variable)
                for path, s in zip(flat.paths, flat.sources, strict=True)
                if s.variable is not None
            ]
        for path, variable in entries:
            if resolve is not None:
                axis = resolve(spec, path, variable)
            else:
                axis = spec.axis_of(path, variable) if isinstance(spec, StateAxes) else spec
            place = "/".join(map(str, (where, *path)))
            reached.setdefault(id(variable), []).append((place, axis))
            kinds[id(variable)] = type(variable).__name__
    raise_inconsistent_aliasing(reached, kinds, name)


def raise_inconsistent_aliasing(
    reached: dict[int, list[tuple[str, object]]], kinds: dict[int, str], name: str
) -> None:
    """Raise if a Variable (by id) was `reached` at several places with different axes;
    `kinds` names each Variable's class."""
    clashes = [
        f"Node: {kinds[key]}\n"
        + "\n".join(f"  {place}: {_axis_repr(axis)}" for place, axis in seen)
        for key, seen in reached.items()
        if len({_axis_repr(axis) for _, axis in seen}) > 1
    ]
    if clashes:
        raise TransformError(
            "Inconsistent aliasing detected. The following nodes have different prefixes "
            f"(a Variable reached at several places gets one `{name}`):\n"
            + "\n".join(clashes)
            + "\nGive the places sharing it the same axis, or pass the shared state once."
        )


def check_axis(value: ArrayLike, axis: object, where: str, name: str) -> int | None:
    """The size of `axis` in `value`, or a TransformError naming `where`; None for None.

    A Variable may hold a pytree of arrays (`sow`'s tuple, `capture`'s dict): each of its
    arrays is mapped over `axis`, and they must agree on its size (none: no size)."""
    if axis is None or axis is Carry:
        return None
    if not is_array_like(value) and isinstance(value, tuple | list | dict):
        keyed = jax.tree_util.tree_leaves_with_path(value)
        sizes = [
            (size, f"{where}{jax.tree_util.keystr(keypath)}")
            for keypath, leaf in keyed
            if (size := check_axis(leaf, axis, f"{where}{jax.tree_util.keystr(keypath)}", name))
            is not None
        ]
        return check_sizes(sizes, name)
    ndim = np.ndim(value)
    if not -ndim <= axis < ndim:  # type: ignore[operator]  # axis is an int here (None and Carry returned above)
        raise TransformError(
            f"`{name}` maps axis {axis} of {where}, which has shape {tuple(np.shape(value))}; "
            "give that value the axis, or map it with another axis (None to broadcast)."
        )
    return int(np.shape(value)[axis])  # type: ignore[index]  # axis is an int here (None and Carry returned above)


def check_sizes(sizes: list[tuple[int, str]], name: str, size: int | None = None) -> int | None:
    """The common size of the mapped axes, or a TransformError naming two that disagree."""
    if size is None and sizes:
        size = sizes[0][0]
    for found, where in sizes:
        if found != size:
            first = sizes[0][1]
            raise TransformError(
                f"`{name}`: the mapped axis of {where} has size {found}, but "
                f"{first if sizes[0][0] == size else 'axis_size'} has {size}; all mapped "
                "axes must have the same size."
            )
    return size


class AxisGrouping(Grouping):
    """One output group per axis: updated inputs keep their axis, outputs take `out_axes`."""

    direct_ok = False

    def __init__(self, leaf_axes: list, root_specs: list, out_axes: object, axes: list) -> None:
        self.leaf_axes = leaf_axes
        self.root_specs = root_specs
        self.out_axes = out_axes
        self.axes = axes
        self.index = {axis: i for i, axis in enumerate(axes)}
        self.n_groups = len(axes)

    def group_of(self, spec: object, path: Path, leaf: object, name: str) -> int:
        if isinstance(spec, StateAxes):
            try:
                spec = spec.axis_of(path, leaf)
            except LookupError:
                raise TransformError(
                    f"`{name}`: {spec!r} has no filter matching a new "
                    f"{type(leaf).__name__} at {'/'.join(map(str, path))}; end it with `...: None`."
                ) from None
        return self.index[spec]

    def input_group(self, k: int) -> int:
        return self.index[self.leaf_axes[k]]

    def new_input_group(self, root: int, path: Path, leaf: object) -> int:
        return self.group_of(self.root_specs[root], path, leaf, "in_axes")

    def output_group(self, spec: object, path: Path, leaf: object) -> int:
        return self.group_of(spec, path, leaf, "out_axes")

    def output_specs(self, out: object, treedef: Any) -> list:
        return prefix_per_leaf(self.out_axes, treedef, is_axis_leaf, "out_axes")

    def check_returned(
        self, out_roots: list, root_specs: list, input_leaf: Callable[[object], int | None]
    ) -> None:
        """A returned input Variable keeps its input axis: `out_axes` giving it another is
        an error (as in Flax NNX), not a silent choice of one of the two."""
        for j, (root, spec) in enumerate(zip(out_roots, root_specs, strict=True)):
            for path, variable in _variables_of(root):
                k = input_leaf(variable)
                if k is None:
                    continue
                axis = spec.axis_of(path, variable) if isinstance(spec, StateAxes) else spec
                if axis != self.leaf_axes[k]:
                    where = "/".join(map(str, path)) or "the root"
                    raise TransformError(
                        f"Inconsistent aliasing detected: the {type(variable).__name__} at "
                        f"{where} of output graph #{j} is an input mapped on axis "
                        f"{self.leaf_axes[k]!r} (in_axes) but `out_axes` gives it {axis!r}. "
                        "One Variable has one axis: give the output the same axis, or return "
                        "a copy (`clone`)."
                    )


def prefix_per_leaf(
    prefix: object, treedef: Any, is_spec_leaf: Callable[[object], bool], name: str
) -> list:
    """The entry of `prefix` (an `out_axes`/`out_specs` prefix of an output) for each
    leaf of the output `treedef`, or a `TransformError` naming `name` and the path where
    the prefix does not fit."""
    if is_spec_leaf(prefix):
        return [prefix] * treedef.num_leaves
    return _broadcast(prefix, treedef, [None] * treedef.num_leaves, name)


def _broadcast(prefix: object, treedef: Any, kinds: list, name: str) -> list:
    """`prefix` broadcast over a tree of `treedef` whose leaves are of `kinds` (for the
    error text): one entry per leaf, or a `TransformError` saying where it does not fit."""
    skeleton = treedef.unflatten([_Slot(kind) for kind in kinds])
    try:
        full = broadcast_prefix(prefix, skeleton, is_leaf=lambda x: isinstance(x, _Slot), name=name)
    except PrefixError as error:
        raise TransformError(str(error)) from None
    return treedef.flatten_up_to(full)


def _axes_in(spec: object) -> list:
    if isinstance(spec, StateAxes):
        return list(spec.axes)
    if is_axis_leaf(spec):
        return [spec]
    leaves = jax.tree_util.tree_leaves(spec, is_leaf=is_axis_leaf)
    return [axis for leaf in leaves for axis in _axes_in(leaf)]


def sorted_axes(specs: Iterable[object]) -> list:
    found = set()
    for spec in specs:
        found.update(_axes_in(spec))
    return sorted(found, key=lambda a: (a is not None, a if isinstance(a, int) else 0))
