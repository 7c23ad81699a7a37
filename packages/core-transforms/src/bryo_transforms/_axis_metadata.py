"""`transform_metadata`: the mapped axis kept in the Variables' sharding metadata.

A Variable stacked along a `vmap`/`scan`/`pmap` axis has one more dimension outside the
transform than inside. With `transform_metadata={PARTITION_NAME: 'layers'}` its sharding
metadata follows: inside, the function sees `out_sharding=('din', 'dout')`; outside,
`('layers', 'din', 'dout')` (the name inserted where the axis is). `with_axis_metadata`
wraps the function a transform runs: it takes the entry out of the Variables of the
arguments (at their in axis) on entry, and puts it back into the arguments' Variables
(new ones included) and the outputs' (at their out axis) on exit. `transform_metadata`
is the same as a decorator of its own, for simple-mode transforms.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from bryo_graph import (
    PARTITION_NAME,
    Variable,
    add_axis,
    flat_graph,
    is_graph_node,
    remove_axis,
)

from ._axes import StateAxes
from ._errors import TransformError
from ._simple import Inputs, check_no_aliases, tree_mode, write_back
from ._simple import variables_of as tree_variables

AxisFn = Callable[[Any, int, Mapping[str, object]], Any]


def _variables_under(value: object) -> list[Variable]:
    if isinstance(value, Variable):
        return [value]
    if is_graph_node(value):
        return [s.variable for s in flat_graph(value).sources if s.variable is not None]
    return tree_variables(value)


def _axis_variables(value: object, prefix: object, name: str, found: list) -> None:
    """Append `(Variable, axis)` for every Variable of `value` that `prefix` (an
    `in_axes`/`out_axes` prefix of it) maps along an int axis."""
    if isinstance(prefix, int) and not isinstance(prefix, bool):
        found.extend((v, prefix) for v in _variables_under(value))
    elif isinstance(prefix, StateAxes):
        if not is_graph_node(value):
            raise TransformError(
                f"`{name}`: a StateAxes is for a graph node; it meets a {type(value).__name__}."
            )
        flat = flat_graph(value)
        for path, source in zip(flat.paths, flat.sources, strict=True):
            if source.variable is not None:
                axis = prefix.axis_of(path, source.variable)
                if isinstance(axis, int):
                    found.append((source.variable, axis))
    elif isinstance(prefix, tuple | list) and isinstance(value, tuple | list):
        if len(prefix) != len(value):
            raise TransformError(
                f"`{name}` has {len(prefix)} entries for a {type(value).__name__} of "
                f"{len(value)}; give one axis (or prefix) per element."
            )
        for item, item_prefix in zip(value, prefix, strict=True):
            _axis_variables(item, item_prefix, name, found)
    elif isinstance(prefix, Mapping) and isinstance(value, Mapping):
        for key, item in value.items():
            _axis_variables(item, prefix.get(key), name, found)
    # None, Carry and other prefixes leave the Variables under them alone


def _shift_axes(pairs: list, metadata: Mapping[str, object], axis_fn: AxisFn) -> None:
    seen: set[int] = set()
    for variable, axis in pairs:
        if id(variable) not in seen:
            seen.add(id(variable))
            axis_fn([variable], axis, metadata)


def _args_prefix(in_axes: object, args: tuple) -> tuple:
    return tuple(in_axes) if isinstance(in_axes, tuple | list) else (in_axes,) * len(args)


def with_axis_metadata(
    f: Callable, in_axes: object, out_axes: object, metadata: Mapping[str, object] | None
) -> Callable:
    """`f` with the axis in `metadata` (`{PARTITION_NAME: name, ...}`) taken out of its
    arguments' Variables' sharding metadata inside and put back, and added to its
    outputs' Variables at `out_axes`; `f` itself without `PARTITION_NAME`."""
    if not metadata or PARTITION_NAME not in metadata:
        return f

    @functools.wraps(f)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        prefix = _args_prefix(in_axes, args)
        found: list = []
        _axis_variables(args, prefix, "in_axes", found)
        _shift_axes(found, metadata, remove_axis)
        out = f(*args, **kwargs)
        after: list = []
        _axis_variables(args, prefix, "in_axes", after)
        _axis_variables(out, out_axes, "out_axes", after)
        _shift_axes(after, metadata, add_axis)
        return out

    return wrapped


def transform_metadata(
    f: Callable[..., Any] | None = None,
    /,
    *,
    in_axes: object = 0,
    out_axes: object = 0,
    partition: str | None,
    graph: bool | None = None,
) -> Any:
    """Keep a mapped axis in the sharding metadata around `f`, for simple-mode transforms.

    Put it under `vmap(..., graph_updates=False)` (or `scan`) with the same axes: `f`
    sees its arguments' Variables with the `partition` entry taken out of their sharding
    metadata (at their in axis); afterwards the arguments' Variables hold the values `f`
    gave them, and the Variables `f` returns have `partition` inserted at their out axis.

    Args:
        f: the function (or use `@transform_metadata(partition=...)`).
        in_axes: the transform's `in_axes` (ints, None, `StateAxes`, `Carry`).
        out_axes: the transform's `out_axes`.
        partition: the mesh axis name of the mapped axis (`PARTITION_NAME`'s value).
        graph: graph (default) or tree mode (`graph=False`: the arguments must be trees).

    Returns:
        The wrapped function.

    Example:
        >>> @vmap(in_axes=0, out_axes=0, graph_updates=False)      # doctest: +SKIP
        ... @transform_metadata(in_axes=0, out_axes=0, partition="layers")
        ... def init(rngs):
        ...     return Block(rngs)
    """
    if f is None:
        return functools.partial(
            transform_metadata, in_axes=in_axes, out_axes=out_axes, partition=partition, graph=graph
        )
    name = "transform_metadata"
    tree = tree_mode(graph)
    inputs = Inputs(name, tree)
    inner = with_axis_metadata(f, in_axes, out_axes, {PARTITION_NAME: partition})

    def checked(*args: Any, **kwargs: Any) -> Any:
        out = inner(*args, **kwargs)
        # `wrapper` refused aliases among the arguments already: only the output's count
        check_no_aliases(name, {"args": (args, kwargs), "out": out}, tree=tree, only="out")
        return out

    pure = inputs.with_updates(checked)

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        check_no_aliases(name, {"args": args, "kwargs": kwargs})
        variables = inputs.variables(args, kwargs)  # tree mode: checked to be a tree
        out, values, changed = pure(*args, **kwargs)
        write_back(variables, values, changed)
        return out

    return wrapper
