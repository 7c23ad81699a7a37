"""`pmap`: `jax.pmap` for functions of graph nodes, with `StateAxes` for their state.

The same machinery as `vmap` (`_vmap.lifted_map`) with `jax.pmap` as the map: the axes
are expanded per State leaf and array argument, state changed inside comes back on the
axis it went in with. Each call traces the function anew (as `vmap` does), and `jax.pmap`
compiles it per trace: keep `pmap` for multi-device code that calls it rarely, or put
it under `jit`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import jax

from ._axis_metadata import with_axis_metadata
from ._options import decorator_or_none
from ._simple import Inputs, graph_updates_on, simple_vmap, tree_mode
from ._vmap import check_prefixes, lifted_map

F = TypeVar("F", bound=Callable[..., Any])


def pmap(
    f: F | None = None,
    /,
    *,
    axis_name: Any = None,
    in_axes: object = 0,
    out_axes: object = 0,
    devices: Sequence[Any] | None = None,
    backend: str | None = None,
    axis_size: int | None = None,
    transform_metadata: Mapping[str, object] | None = None,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> F:
    """`jax.pmap` for functions of graph nodes: map over devices.

    Args:
        f: the function (or use `@pmap(axis_name=...)`).
        axis_name: the name of the mapped axis, for collectives (`jax.lax.psum`).
        in_axes: as for `vmap` (ints, None, `StateAxes` at graph nodes).
        out_axes: as for `vmap`.
        devices: the devices to map over (default: all local ones).
        backend: as for `jax.pmap`.
        axis_size: the mapped size when no input is mapped.
        transform_metadata: as for `vmap`.
        graph: graph mode (default) or tree mode, see `jit`.
        graph_updates: graph mode with updates (default), or simple mode (`jax.pmap`
            over the arguments as pytrees; no `StateAxes`).

    Returns:
        The mapped function; state changed inside is written back.

    Example:
        >>> @pmap(axis_name="devices")
        ... def step(model, x):
        ...     return jax.lax.pmean(model(x), "devices")
    """
    partial = decorator_or_none(
        pmap,
        f,
        axis_name=axis_name,
        in_axes=in_axes,
        out_axes=out_axes,
        devices=devices,
        backend=backend,
        axis_size=axis_size,
        transform_metadata=transform_metadata,
        graph=graph,
        graph_updates=graph_updates,
    )
    if partial is not None:
        return partial
    assert f is not None
    check_prefixes("pmap", in_axes, out_axes, graph_updates_on(graph, graph_updates))
    fn = with_axis_metadata(f, in_axes, out_axes, transform_metadata)
    options: dict[str, Any] = {"axis_name": axis_name, "devices": devices, "backend": backend}
    options["axis_size"] = axis_size
    if not graph_updates_on(graph, graph_updates):
        inputs = Inputs("pmap", tree_mode(graph))
        return simple_vmap(fn, inputs, in_axes, {"out_axes": out_axes, **options}, jax.pmap)  # type: ignore[return-value]  # the mapped function takes f's arguments
    return lifted_map("pmap", fn, in_axes, out_axes, axis_size, jax.pmap, options)  # type: ignore[return-value]  # the mapped function takes f's arguments
