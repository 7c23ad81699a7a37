"""Taking pytrees apart along an axis, and putting stacked outputs back together.

`unbind_tree` turns the inputs of a scan or vmap into arrays with the axis in front plus a
function rebuilding one element; `OutputStacker` turns per-step outputs into arrays and
later wraps their stacked versions. Axis-carrying leaves (NamedArray) go through their
backend's `NamedLeaf`; plain arrays use the positional axis, or their first axis when the
axis is named; every other leaf is static and reaches each step unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from bryo_pytree import keypath_to_path, path_str

from ._hooks import is_named_leaf, named_leaf_handler
from ._types import AxisInfo, PyTree, ScanAxisError


def is_array(leaf: object) -> bool:
    """Whether `leaf` is an array core-scan maps over (JAX or NumPy, not Python scalars)."""
    return isinstance(leaf, jax.Array | np.ndarray)


@dataclasses.dataclass
class Unbound:
    """A pytree split along an axis: `arrays` have the axis in front (`length` long)."""

    arrays: list[jax.Array]
    rebuild: Callable[[Sequence[jax.Array]], PyTree]
    length: int | None


def _where(what: str, path: tuple) -> str:
    return f"`{what}`" + (f" at {path_str(keypath_to_path(path))}" if path else "")


def _describe(leaf: object) -> str:
    handler = named_leaf_handler(leaf)
    if handler is not None:
        return handler.describe(leaf)
    return f"array of shape {tuple(np.shape(leaf))}"


def unbind_tree(
    tree: PyTree, axis: AxisInfo, *, what: str, missing: str = "error", map_unnamed: bool = True
) -> Unbound:
    """Split every mapped leaf of `tree` along `axis` (moved to the front).

    Args:
        tree: the inputs (any pytree).
        axis: the resolved axis.
        what: the argument's name, for error messages.
        missing: "error" (scan) or "broadcast" (vmap) for named leaves lacking the axis.
        map_unnamed: map plain arrays (over their first axis when `axis` is named).

    Returns:
        The `Unbound` inputs. Raises `ScanAxisError` naming the leaf and its axes when a
        leaf lacks the axis or the sizes disagree.
    """
    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_named_leaf)
    arrays: list[jax.Array] = []
    plans: list[tuple[str, object]] = []
    sizes: list[tuple[tuple, object, int]] = []
    for path, leaf in leaves:
        moved, rebuild = _unbind_leaf(path, leaf, axis, what, missing, map_unnamed)
        if moved is None:
            plans.append(("static", leaf))
            continue
        plans.append(("mapped", rebuild))
        arrays.append(moved)
        sizes.append((path, leaf, moved.shape[0]))
    length = _common_length(sizes, axis, what)

    def rebuild_tree(slices: Sequence[jax.Array]) -> PyTree:
        it = iter(slices)
        out = [rebuild(next(it)) if kind == "mapped" else rebuild for kind, rebuild in plans]
        return treedef.unflatten(out)

    return Unbound(arrays, rebuild_tree, length)


def _unbind_leaf(
    path: tuple, leaf: object, axis: AxisInfo, what: str, missing: str, map_unnamed: bool
) -> tuple[jax.Array | None, object]:
    handler = named_leaf_handler(leaf)
    if handler is not None:
        array, position, rebuild = handler.unbind(leaf, axis)
        if position is None:
            if missing == "broadcast":
                return None, leaf
            raise ScanAxisError(
                f"{_where(what, path)}: {axis} is missing from {handler.describe(leaf)}. "
                "Every named input of a scan must carry the scanned axis; pass arrays "
                "without it through a closure instead."
            )
        return jnp.moveaxis(array, position, 0), rebuild
    if not is_array(leaf) or not (map_unnamed or axis.position is not None):
        return None, leaf
    position = axis.position if axis.position is not None else 0
    if np.ndim(leaf) <= position or np.ndim(leaf) < -position:
        raise ScanAxisError(
            f"{_where(what, path)}: {axis} does not exist in an array of shape "
            f"{tuple(np.shape(leaf))}. Give the arrays that axis, or pick another `axis`."
        )
    return jnp.moveaxis(jnp.asarray(leaf), position, 0), _identity


def _identity(array: jax.Array) -> jax.Array:
    return array


def _common_length(sizes: list[tuple[tuple, object, int]], axis: AxisInfo, what: str) -> int | None:
    expected = axis.size if axis.size is not None else (sizes[0][2] if sizes else None)
    wrong = [(path, leaf, size) for path, leaf, size in sizes if size != expected]
    if not wrong:
        return expected
    path, leaf, size = wrong[0]
    origin = (
        f"the axis spec says {axis.size}"
        if axis.size is not None
        else f"{_where(what, sizes[0][0])} ({_describe(sizes[0][1])}) has {expected}"
    )
    raise ScanAxisError(
        f"{_where(what, path)}: {axis} has size {size} in {_describe(leaf)}, but {origin}. "
        "All scanned inputs must share the axis size; fix the inputs or the `axis` spec."
    )


class OutputStacker:
    """Per-step outputs -> arrays (inside a trace), stacked arrays -> outputs (after).

    `flatten` records the output structure and the named leaves' templates each time it
    runs (a transformation may trace the body more than once; the last one wins, and all
    traces agree on the static structure).
    """

    def __init__(self, *, static_nonarrays: bool) -> None:
        self._static_nonarrays = static_nonarrays
        self._treedef: jax.tree_util.PyTreeDef | None = None
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
                handler, element = payload  # type: ignore[misc]
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
