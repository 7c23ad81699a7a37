"""`vmap(f, axis)`: `jax.vmap` over a positional or named axis, outputs re-wrapped.

The same unbinding as `scan` (shared through `_trees`), so named inputs lose the mapped
axis inside `f` and named outputs gain it in front. Named inputs without the axis, and
every non-array leaf, are broadcast to all elements.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax

from ._hooks import resolve_axis
from ._trees import OutputStacker, unbind_tree
from ._types import ScanAxisError


def vmap(
    f: Callable[..., Any], axis: object, *, map_unnamed: bool | None = None
) -> Callable[..., Any]:
    """Vectorize `f` over `axis`: `vmap(f, axis)(*args, **kwargs)`.

    Args:
        f: the function to map.
        axis: an int (positional axis of plain arrays) or an axis name / `Axis`.
        map_unnamed: whether plain arrays are mapped (over their first axis) when `axis`
            is named. Default: False for names (they are broadcast, as in Haliax's
            `vmap`); plain arrays are always mapped over a positional axis.

    Returns:
        The mapped function; outputs are stacked on a new leading axis.

    Example:
        >>> import jax.numpy as jnp
        >>> vmap(lambda x: x.sum(), 1)(jnp.ones((2, 3))).tolist()
        [2.0, 2.0, 2.0]
    """

    @functools.wraps(f)
    def mapped(*args: Any, **kwargs: Any) -> Any:
        info = resolve_axis(axis)
        unnamed = bool(map_unnamed) if info.name is not None else True
        inputs = unbind_tree(
            (args, kwargs), info, what="args", missing="broadcast", map_unnamed=unnamed
        )
        size = inputs.length if inputs.length is not None else info.size
        if size is None:
            raise ScanAxisError(
                f"`vmap` over {info} found no input with that axis and the axis has no size; "
                "pass an Axis with a size or an input that carries the axis."
            )
        outputs = OutputStacker(static_nonarrays=True)

        def one(slices: list[jax.Array]) -> list[jax.Array]:
            step_args, step_kwargs = inputs.rebuild(slices)
            return outputs.flatten(f(*step_args, **step_kwargs))

        stacked = jax.vmap(one, axis_size=size)(inputs.arrays)
        return outputs.unflatten(stacked, info)

    return mapped
