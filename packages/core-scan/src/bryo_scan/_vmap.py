"""`vmap(f, axis)`: `jax.vmap` over a positional or named axis (or several), outputs re-wrapped.

The same unbinding as `scan` (shared through `_trees`), so named inputs lose the mapped
axis inside `f` and named outputs gain it in front. Named inputs without the axis, and
every non-array leaf, are broadcast to all elements; plain arrays are mapped over a
positional axis, and over their first axis for a named one only with `map_unnamed=True`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax

from ._hooks import is_named_leaf, resolve_axis
from ._trees import ArgNames, OutputStacker, Rules, has_extent, unbind_inputs


def vmap_arguments(
    f: Callable[..., Any],
    axis: object,
    args: tuple,
    kwargs: dict[str, Any],
    *,
    rules: Rules,
    names: ArgNames,
) -> Any:
    """`f(*args, **kwargs)` mapped over `axis` for the leaves `rules` pick (as `scan`)."""
    info = resolve_axis(axis)
    inputs = unbind_inputs(args, kwargs, info, rules=rules, names=names, op="vmap")
    size = inputs.steps(info, "vmap")
    outputs = OutputStacker(static_nonarrays=True)

    def one(slices: list[jax.Array]) -> list[jax.Array]:
        step = inputs.rebuild(slices)
        return outputs.flatten(f(*step.args, **step.kwargs))

    stacked = jax.vmap(one, axis_size=size)(inputs.arrays)
    return outputs.unflatten(stacked, info)


def vmap(
    f: Callable[..., Any], axis: object, *, map_unnamed: bool | None = None
) -> Callable[..., Any]:
    """Vectorize `f` over `axis`: `vmap(f, axis)(*args, **kwargs)`.

    Args:
        f: the function to map.
        axis: an int (positional axis of plain arrays), an axis name / `Axis`, or a tuple
            or list of them: `f` is then mapped over each, the first one outermost, so
            outputs gain the axes in that order.
        map_unnamed: whether plain arrays are mapped (over their first axis) when `axis`
            is named. Default: False for names (they are broadcast); plain arrays are
            always mapped over a positional axis.

    Returns:
        The mapped function; outputs are stacked on a new leading axis.

    Example:
        >>> import jax.numpy as jnp
        >>> vmap(lambda x: x.sum(), 1)(jnp.ones((2, 3))).tolist()
        [2.0, 2.0, 2.0]
    """
    if isinstance(axis, tuple | list):
        mapped = f
        for one_axis in reversed(axis):
            mapped = vmap(mapped, one_axis, map_unnamed=map_unnamed)
        return mapped

    @functools.wraps(f)
    def mapped_fn(*args: Any, **kwargs: Any) -> Any:
        info = resolve_axis(axis)
        unnamed = bool(map_unnamed) if info.name is not None else True
        return vmap_arguments(
            f,
            info,
            args,
            kwargs,
            rules=has_extent if unnamed else is_named_leaf,
            names=ArgNames.of(f, skip=0),
        )

    return mapped_fn
