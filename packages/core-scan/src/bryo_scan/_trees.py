"""Taking pytrees apart along an axis, and putting stacked outputs back together.

`unbind_inputs` turns the arguments of a scan or vmap into arrays with the axis in front
plus a function rebuilding the arguments of one step; `OutputStacker` turns per-step
outputs into arrays and later wraps their stacked versions. Which leaves are scanned is a
per-leaf predicate (Haliax's `is_scanned`): by default axis-carrying leaves (NamedArray)
that have the axis, and plain arrays with at least one dimension (their first one when the
axis is named). A block that is not a pytree (a `pytree=False` Flax NNX module) is taken
apart by its backend's block splitter and put back together in each step. Everything else
reaches each step unchanged: Python values, 0-d arrays, NamedArrays without the axis.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, cast

import jax
import jax.numpy as jnp
import numpy as np

from bryo_pytree import is_array, pytree_dataclass, static_field

from ._hooks import is_named_leaf, named_leaf_handler, registered_block_splitter
from ._types import AxisInfo, PyTree, ScanAxisError

ScanPredicate = Callable[[Any], bool]
"""`is_scanned(leaf) -> bool`: whether an array leaf is scanned (or vmapped) over the axis."""

IsScanned = bool | ScanPredicate | None
"""What users pass as `is_scanned`: a predicate, True/False for every array, None: default."""

Rules = Any
"""A `ScanPredicate`, or a pytree prefix of `Inputs(args, kwargs)` with predicates as leaves
(e.g. `Inputs((every_array, has_extent), has_extent)`: a rule per positional argument)."""


def has_extent(leaf: object) -> bool:
    """The default `is_scanned`: axis-carrying leaves, and arrays with at least one dimension.

    Scalars (Python numbers, 0-d arrays) are never scanned; they reach every step.
    """
    return is_named_leaf(leaf) or (is_array(leaf) and np.ndim(leaf) >= 1)


def every_array(leaf: object) -> bool:
    """`is_scanned=True`: every array leaf is scanned (a 0-d one is then an error)."""
    return True


def no_array(leaf: object) -> bool:
    """`is_scanned=False`: nothing is scanned; every input reaches each step unchanged."""
    return False


def scan_predicate(is_scanned: IsScanned, what: str = "is_scanned") -> ScanPredicate:
    """The predicate of an `is_scanned` argument, or a `TypeError` saying what works."""
    if is_scanned is None:
        return has_extent
    if isinstance(is_scanned, bool):
        return every_array if is_scanned else no_array
    if callable(is_scanned):
        return is_scanned
    raise TypeError(
        f"`{what}` must be True, False, a predicate `leaf -> bool` or None (the default: "
        f"NamedArrays with the axis and arrays with at least one dimension); got {is_scanned!r}."
    )


class Inputs(NamedTuple):
    """The positional and keyword arguments of one call."""

    args: tuple
    kwargs: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class ArgNames:
    """How error messages name a function's arguments: by its parameter names.

    Attributes:
        positional: names of the positional arguments, in order.
        varargs: the name of `*args`, for the positional arguments past those.
    """

    positional: tuple[str, ...] = ()
    varargs: str = "args"

    @classmethod
    def of(cls, fn: Callable, skip: int) -> ArgNames:
        """The names of `fn`'s positional parameters after the first `skip` (the carry...)."""
        try:
            parameters = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            return cls()
        positional: list[str] = []
        for parameter in parameters[skip:]:
            if parameter.kind == inspect.Parameter.VAR_POSITIONAL:
                return cls(tuple(positional), parameter.name)
            if parameter.kind in (
                inspect.Parameter.POSITIONAL_ONLY,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
            ):
                positional.append(parameter.name)
        return cls(tuple(positional))

    def prefixed(self, *names: str) -> ArgNames:
        """These names for arguments passed in front of the function's own."""
        return ArgNames((*names, *self.positional), self.varargs)

    def name(self, path: tuple) -> str:
        """`foo.my_array`, `y`, `xs[1]['w']`: a leaf's key path in `(args, kwargs)`, named."""
        group, key, rest = path[0], path[1], path[2:]
        if group.name == "kwargs":
            base = str(key.key)
        elif key.idx < len(self.positional):
            base = self.positional[key.idx]
        else:
            base = f"{self.varargs}[{key.idx - len(self.positional)}]"
        return base + jax.tree_util.keystr(rest)


@dataclasses.dataclass(frozen=True)
class _Leaf:
    """A leaf of the arguments, remembered for error messages."""

    path: tuple
    leaf: object
    size: int = 0  # its size along the axis, when scanned


@dataclasses.dataclass
class Unbound:
    """Arguments split along an axis: `arrays` have the axis in front (`length` long).

    Attributes:
        arrays: the scanned leaves, with the axis moved to the front.
        rebuild: the arguments of one step from one slice of each array.
        length: the common size of the axis, or None when nothing is scanned.
        names: how errors name the arguments.
        lacking: named leaves without the axis (broadcast), for errors.
    """

    arrays: list[jax.Array]
    rebuild: Callable[[Sequence[jax.Array]], Inputs]
    length: int | None
    names: ArgNames
    lacking: tuple[_Leaf, ...] = ()

    def steps(self, axis: AxisInfo, op: str) -> int:
        """The number of steps: the scanned inputs' size, else the axis's; or an error."""
        if self.length is not None:
            return self.length
        if axis.size is not None:
            return axis.size
        if self.lacking:
            found = "; ".join(
                f"{self.names.name(x.path)} is a {_describe(x.leaf)}" for x in self.lacking
            )
            raise ScanAxisError(
                f"{axis} is missing from every input of `{op}` ({found}), so there is nothing "
                f"to {op} over and no number of steps. Check the axis name, or pass an Axis "
                "with a size to broadcast these inputs to every step."
            )
        hint = (
            f"Pass an axis that carries its size, e.g. Axis({axis.name!r}, 100) instead of "
            f"{axis.name!r}, or declare the size with bryo_named's `axis_sizes({axis.name}=100)`."
            if axis.name is not None
            else "Pass a named axis with a size, e.g. Axis('Time', 100)."
        )
        raise ScanAxisError(
            f"cannot tell how many steps to take over {axis}: no input is scanned (the inputs "
            f"are None, static, or left out by `is_scanned`). {hint}"
        )


def _describe(leaf: Any) -> str:
    handler = named_leaf_handler(leaf)
    if handler is not None:
        return handler.describe(leaf)
    return f"array of shape {tuple(np.shape(leaf))}"


def _leaf_predicates(rules: Rules, tree: PyTree) -> Iterator[ScanPredicate]:
    """One predicate per leaf of `tree` (in flattening order) from a prefix of `tree`."""
    if callable(rules):
        return itertools.repeat(cast(ScanPredicate, rules))
    per_subtree = jax.tree_util.tree_map(
        lambda rule, subtree: [rule] * len(jax.tree_util.tree_leaves(subtree, is_named_leaf)),
        rules,
        tree,
        is_leaf=callable,
    )
    return itertools.chain.from_iterable(
        jax.tree_util.tree_leaves(per_subtree, is_leaf=lambda node: isinstance(node, list))
    )


_LACKS_AXIS = object()  # `_unbind_leaf`'s mark for a named leaf without the axis


@pytree_dataclass
class _SplitBlock:
    """A non-pytree block in the inputs: its pytree, and the way back."""

    tree: PyTree
    rebuild: Callable[[PyTree], object] = static_field()


def _split_blocks(tree: PyTree) -> tuple[PyTree, bool]:
    """`tree` with every non-pytree block leaf that has a block splitter split."""
    found = False

    def split(leaf: object) -> object:
        nonlocal found
        splitter = None if is_array(leaf) else registered_block_splitter(leaf)
        if splitter is None:
            return leaf
        found = True
        return _SplitBlock(*splitter(leaf))

    return jax.tree_util.tree_map(split, tree, is_leaf=is_named_leaf), found


def _join_blocks(tree: PyTree) -> PyTree:
    return jax.tree_util.tree_map(
        lambda node: node.rebuild(node.tree) if isinstance(node, _SplitBlock) else node,
        tree,
        is_leaf=lambda node: isinstance(node, _SplitBlock),
    )


def unbind_inputs(
    args: tuple,
    kwargs: dict[str, Any],
    axis: AxisInfo,
    *,
    rules: Rules = has_extent,
    names: ArgNames = ArgNames(),
    op: str = "scan",
) -> Unbound:
    """Split the scanned leaves of `(args, kwargs)` along `axis` (moved to the front).

    Args:
        args, kwargs: the arguments of the function being scanned or mapped.
        axis: the resolved axis.
        rules: which array leaves are scanned: a predicate, or a prefix of `(args, kwargs)`
            holding predicates. A NamedArray is scanned only when it also has the axis.
        names: how error messages name the arguments.
        op: "scan" or "vmap", for error messages.

    Returns:
        The `Unbound` arguments. Raises `ScanAxisError` naming the argument when a scanned
        leaf lacks a positional axis or when the sizes along the axis disagree.
    """
    tree, has_blocks = _split_blocks(Inputs(tuple(args), dict(kwargs)))
    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_named_leaf)
    predicates = _leaf_predicates(rules, tree)
    arrays: list[jax.Array] = []
    plans: list[tuple[str, Any]] = []  # ("mapped", rebuild) or ("static", leaf)
    scanned: list[_Leaf] = []
    lacking: list[_Leaf] = []
    # `predicates` may be endless (one rule for every leaf): zip stops with the leaves.
    for (path, leaf), predicate in zip(leaves, predicates, strict=False):
        moved, rebuild = _unbind_leaf(path, leaf, axis, predicate, names)
        if moved is None:
            plans.append(("static", leaf))
            if rebuild is _LACKS_AXIS:
                lacking.append(_Leaf(path, leaf))
            continue
        plans.append(("mapped", rebuild))
        arrays.append(moved)
        scanned.append(_Leaf(path, leaf, moved.shape[0]))
    length = _common_length(scanned, axis, names, op)

    def rebuild_inputs(slices: Sequence[jax.Array]) -> Inputs:
        it = iter(slices)
        out = [rebuild(next(it)) if kind == "mapped" else rebuild for kind, rebuild in plans]
        rebuilt = treedef.unflatten(out)
        return Inputs(*(_join_blocks(rebuilt) if has_blocks else rebuilt))

    return Unbound(arrays, rebuild_inputs, length, names, tuple(lacking))


def _unbind_leaf(
    path: tuple, leaf: object, axis: AxisInfo, predicate: ScanPredicate, names: ArgNames
) -> tuple[jax.Array | None, object]:
    """`(array with the axis in front, rebuild of a slice)`, or `(None, ...)` if not scanned."""
    handler = named_leaf_handler(leaf)
    if handler is not None:
        array, position, rebuild = handler.unbind(leaf, axis)
        if position is None:
            return None, _LACKS_AXIS
        if not predicate(leaf):
            return None, None
        return jnp.moveaxis(array, position, 0), rebuild
    if not is_array(leaf) or not predicate(leaf):
        return None, None
    position = axis.position if axis.position is not None else 0
    if np.ndim(leaf) <= position or np.ndim(leaf) < -position:
        raise ScanAxisError(
            f"{names.name(path)}: {axis} does not exist in an array of shape "
            f"{tuple(np.shape(leaf))}. Give the array that axis, pick another `axis`, or "
            "leave it out of the scan with `is_scanned`."
        )
    return jnp.moveaxis(jnp.asarray(leaf), position, 0), _identity


def _identity(array: jax.Array) -> jax.Array:
    return array


def _extent(scanned: _Leaf, axis: AxisInfo, names: ArgNames) -> str:
    """`y has leading dimension 1 (array of shape (1, 3))`: a leaf's size along the axis."""
    name, described = names.name(scanned.path), _describe(scanned.leaf)
    if named_leaf_handler(scanned.leaf) is not None and axis.name is not None:
        return f"{name} has axis {axis.name!r} of size {scanned.size} ({described})"
    if axis.position not in (None, 0):
        return f"{name} has size {scanned.size} along {axis} ({described})"
    return f"{name} has leading dimension {scanned.size} ({described})"


def _common_length(scanned: list[_Leaf], axis: AxisInfo, names: ArgNames, op: str) -> int | None:
    if axis.size is None and not scanned:
        return None
    expected = axis.size if axis.size is not None else scanned[0].size
    wrong = [s for s in scanned if s.size != expected]
    if not wrong:
        return expected
    details = "; ".join(_extent(s, axis, names) for s in wrong)
    origin = (
        "the axis spec"
        if axis.size is not None
        else f"the first scanned input: {_extent(scanned[0], axis, names)}"
    )
    header = (
        f"scan got `length` argument of {expected} but some inputs had different leading "
        f"axis sizes: {details}"
        if op == "scan"
        else f"`{op}` over {axis} got inputs of different sizes: {details}"
    )
    escape = ", or leave an input out with `is_scanned`" if op in _TAKES_IS_SCANNED else ""
    raise ScanAxisError(
        f"{header}. The size of {axis} comes from {origin}; every scanned input needs that "
        f"size. Fix those inputs or the `axis`{escape}."
    )


_TAKES_IS_SCANNED = ("scan", "BlockSeq")


class OutputStacker:
    """Per-step outputs -> arrays (inside a trace), stacked arrays -> outputs (after).

    `flatten` records the output structure and the named leaves' templates each time it
    runs (a transformation may trace the body more than once; the last one wins, and all
    traces agree on the static structure).
    """

    def __init__(self, *, static_nonarrays: bool) -> None:
        self._static_nonarrays = static_nonarrays
        self._treedef: Any = None  # a jax.tree_util.PyTreeDef (jax declares it as a variable)
        self._plans: list[tuple[str, object]] = []

    def flatten(self, tree: PyTree) -> list[jax.Array]:
        leaves, self._treedef = jax.tree_util.tree_flatten(tree, is_leaf=is_named_leaf)
        arrays, plans = [], []
        for leaf in leaves:
            handler = named_leaf_handler(leaf)
            if handler is not None:
                arrays.append(handler.unbind(leaf, None)[0])
                plans.append(("named", (handler, leaf)))
            elif self._static_nonarrays and not is_array(leaf):
                plans.append(("static", leaf))
            else:
                arrays.append(leaf)
                plans.append(("array", None))
        self._plans = plans
        return arrays

    def unflatten(self, stacked: Sequence[jax.Array], axis: AxisInfo) -> PyTree:
        assert self._treedef is not None, "flatten must run first"
        it = iter(stacked)
        out = []
        for kind, payload in self._plans:
            if kind == "static":
                out.append(payload)
            elif kind == "array":
                out.append(next(it))
            else:
                handler, element = payload  # type: ignore[misc]  # a 'handler' plan's payload is a (handler, element) pair
                out.append(handler.bind(element, axis, next(it)))
        return self._treedef.unflatten(out)


def stack_trees(trees: Sequence[PyTree], axis: AxisInfo) -> PyTree:
    """Stack equal-structured trees along a new leading `axis` (the Python-loop `scan`)."""
    stacker = OutputStacker(static_nonarrays=True)
    columns = [stacker.flatten(tree) for tree in trees]
    stacked = [jnp.stack(column) for column in zip(*columns, strict=True)]
    return stacker.unflatten(stacked, axis)


def partition_arrays(
    tree: PyTree,
) -> tuple[list[jax.Array], Callable[[Sequence[jax.Array]], PyTree]]:
    """The array leaves of `tree` and a rebuild that puts the other leaves back as they were.

    For `jax.checkpoint` and friends, which accept arrays only (a block may hold Python
    floats or functions as leaves).
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    dynamic = [is_array(leaf) for leaf in leaves]
    arrays = [leaf for leaf, keep in zip(leaves, dynamic, strict=True) if keep]

    def rebuild(new_arrays: Sequence[jax.Array]) -> PyTree:
        it = iter(new_arrays)
        return treedef.unflatten(
            [next(it) if keep else leaf for leaf, keep in zip(leaves, dynamic, strict=True)]
        )

    return arrays, rebuild
