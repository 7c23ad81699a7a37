"""`vmap`: `jax.vmap` for functions of graph nodes, with `StateAxes` for their state.

The axes (`in_axes`/`out_axes` prefixes, `StateAxes` at graph nodes) are expanded to one
axis per State leaf and array argument by `_axes`, checked against the values, and
handed to `jax.vmap` over the pure function; updated state comes back with the axis it
went in with, new state and outputs with their `out_axes`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import jax
import numpy as np

from ._axes import (
    AxisGrouping,
    Carry,
    StateAxes,
    arg_specs,
    check_axis,
    check_consistent_aliasing,
    check_sizes,
    leaf_axes,
    sorted_axes,
    state_leaf,
)
from ._axis_metadata import with_axis_metadata
from ._call import lifted_call
from ._collect import InGroup, NewLeaf, OutPlan
from ._errors import TransformError
from ._layout import scan_args
from ._options import decorator_or_none, positional
from ._plan import CallPlan, PairPath, PlanCache
from ._prefixes import check_prefix
from ._simple import Inputs, graph_updates_on, simple_vmap, tree_mode

F = TypeVar("F", bound=Callable[..., Any])


def vmap(
    f: F | None = None,
    /,
    *,
    in_axes: object = 0,
    out_axes: object = 0,
    axis_name: Any = None,
    axis_size: int | None = None,
    spmd_axis_name: Any = None,
    transform_metadata: Mapping[str, object] | None = None,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> F:
    """`jax.vmap` for functions of graph nodes, with `StateAxes` for their state.

    Args:
        f: the function (or use `@vmap(in_axes=..., out_axes=...)`).
        in_axes: an axis for all positional arguments, or a tuple with a prefix per
            argument: an int, None (broadcast), or for graph nodes a `StateAxes`
            (`StateAxes({'dropout': 0, ...: None})`). Keyword arguments use axis 0.
        out_axes: a prefix of the output: ints, None or `StateAxes` for returned nodes.
        axis_name: as for `jax.vmap`.
        axis_size: as for `jax.vmap`.
        spmd_axis_name: as for `jax.vmap`.
        transform_metadata: `{PARTITION_NAME: name}` (`bryo_graph.PARTITION_NAME`): inside,
            the mapped axis is taken out of the Variables' sharding metadata
            (`out_sharding`), outside it is there with `name`, as Flax NNX does.
        graph: with `graph_updates`, graph mode with updates (the default), or simple
            mode (`jax.vmap` over the arguments as pytrees; no `StateAxes`), see `jit`.
        graph_updates: see `graph`.

    Returns:
        The vectorized function. State changed inside comes back with the axis it went
        in with: a broadcast (None) Variable may only be given unbatched values.

    Example:
        >>> from bryo_transforms import StateAxes
        >>> @vmap(in_axes=(StateAxes({'dropout': 0, ...: None}), None))
        ... def sample(model, x):
        ...     return model(x)
    """
    partial = decorator_or_none(
        vmap,
        f,
        in_axes=in_axes,
        out_axes=out_axes,
        axis_name=axis_name,
        axis_size=axis_size,
        spmd_axis_name=spmd_axis_name,
        transform_metadata=transform_metadata,
        graph=graph,
        graph_updates=graph_updates,
    )
    if partial is not None:
        return partial
    assert f is not None
    check_prefixes("vmap", in_axes, out_axes, graph_updates_on(graph, graph_updates))
    fn = with_axis_metadata(f, in_axes, out_axes, transform_metadata)
    if not graph_updates_on(graph, graph_updates):
        options = {"out_axes": out_axes, "axis_name": axis_name, "axis_size": axis_size}
        options["spmd_axis_name"] = spmd_axis_name
        return simple_vmap(fn, Inputs("vmap", tree_mode(graph)), in_axes, options)  # type: ignore[return-value]  # the mapped function takes f's arguments
    options = {"axis_name": axis_name, "axis_size": axis_size, "spmd_axis_name": spmd_axis_name}
    return lifted_map("vmap", fn, in_axes, out_axes, axis_size, jax.vmap, options)  # type: ignore[return-value]  # the mapped function takes f's arguments


def check_prefixes(transform: str, in_axes: object, out_axes: object, updates: bool) -> None:
    """`check_prefix` of a mapping transform's `in_axes` and `out_axes`."""
    for name, axes in (("in_axes", in_axes), ("out_axes", out_axes)):
        check_prefix(axes, name, transform, graph_updates=updates, mappings=(StateAxes,))


def lifted_map(
    name: str,
    f: Callable,
    in_axes: object,
    out_axes: object,
    axis_size: int | None,
    map_fn: Callable[..., Callable],
    map_options: dict[str, Any],
) -> Callable:
    """`f` mapped by `map_fn` (`jax.vmap`, `jax.pmap`) in graph mode: the axes expanded
    per State leaf and array argument, checked, and handed to `map_fn` with
    `map_options`; `name` is the transform as errors name it."""
    cache = PlanCache(size=16)

    @functools.wraps(f)
    def mapped(*args: Any, **kwargs: Any) -> Any:
        if kwargs and isinstance(in_axes, tuple | list) and len(args) < len(in_axes):
            args, kwargs = positional(f, name, args, kwargs), {}  # in_axes names them
        key, roots, arrays = scan_args(args, kwargs)
        plan = cache.plan(key, roots)
        root_specs, array_specs = arg_specs(plan.sig, in_axes)
        axes = leaf_axes(plan, root_specs)
        check_consistent_aliasing(plan, root_specs)
        sizes = [
            (size, plan.sig.describe_leaf(k))
            for k, (value, axis) in enumerate(zip(plan.leaf_values(), axes, strict=False))
            if (size := check_axis(value, axis, plan.sig.describe_leaf(k), "in_axes")) is not None
        ]
        sizes += [
            (size, f"the array argument #{i} (shape {tuple(np.shape(value))})")
            for i, (value, axis) in enumerate(zip(arrays, array_specs, strict=False))
            if (size := check_axis(value, axis, f"array argument #{i}", "in_axes")) is not None
        ]
        check_sizes(sizes, "in_axes", axis_size)
        for axis in (*axes, *array_specs):
            if axis is Carry:
                raise TransformError(
                    f"`in_axes` of `{name}` cannot hold `Carry` (it is for `scan`)."
                )
        group_axes = sorted_axes([*axes, *root_specs, out_axes])
        grouping = AxisGrouping(axes, root_specs, out_axes, group_axes)
        var_axes = [a for a, meta in zip(axes, plan.sig.metas, strict=False) if meta is not None]
        raw_axes = [a for a, meta in zip(axes, plan.sig.metas, strict=False) if meta is None]

        plans: list[OutPlan] = []  # the traced call's OutPlan, to name an unmapped output

        def transform(pure: Callable) -> Callable:
            def recording(*values: list) -> tuple:
                out = pure(*values)
                plans.append(out[2].value)
                return out

            return map_fn(
                recording,
                in_axes=(var_axes, raw_axes, list(array_specs)),
                out_axes=(list(group_axes), None, None),
                **map_options,
            )

        try:
            return lifted_call(plan, arrays, transform, f, grouping)
        except ValueError as error:
            text = str(error)
            if "out_axes" in text and "None" in text and not isinstance(error, TransformError):
                said = _name_unmapped(text, plans[-1] if plans else None, plan)
                raise TransformError(
                    f"`{name}`: a value that leaves the function unmapped (out_axes None, or "
                    "state broadcast with in_axes None) depends on the mapped inputs. Map "
                    "that state (e.g. `StateAxes({'dropout': 0, ...: None})`) or give it an "
                    f"int out axis. JAX said: {said}"
                ) from error
            raise

    mapped.__wrapped__ = f
    return mapped


_GROUP_PLACE = re.compile(r"out_axes\[0\]\[(\d+)\]\[(\d+)\]")


def _name_unmapped(text: str, out_plan: OutPlan | None, plan: CallPlan) -> str:
    """JAX's error `text` with its place in the groups (`out_axes[0][g][i]`, which means
    nothing to the caller) explained: the input Variable whose update left there (named
    as `args[0]['broadcast']`), a Variable the function created, or an output."""
    match = _GROUP_PLACE.search(text)
    if match is None or out_plan is None:
        return text
    group, position = int(match[1]), int(match[2])
    what = "an output of the function"
    created = out_plan.graph.leaf_plans if out_plan.graph is not None else ()
    for leaf in created:
        if isinstance(leaf, NewLeaf) and leaf.place == InGroup(group, position):
            kind = leaf.meta.type.__name__ if leaf.meta is not None else "array"
            what = f"a {kind} the function created"
    for update in out_plan.sets:
        if (update.group, update.position) == (group, position):
            place = PairPath.of(plan.sig.paths[update.k])
            where = plan.sig.root_places[place.root].name + "".join(
                f"[{key!r}]" for key in place.inner
            )
            kind = type(state_leaf(plan, update.k)).__name__
            what = f"the {kind} at `{where}`, updated inside"
    return f"{text[: match.end()]} ({what}){text[match.end() :]}"
