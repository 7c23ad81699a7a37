"""The command line's mesh spec: `"data=4,model=2"` -> a device `Mesh`.

`bryo demo --mesh` (and scripts that take the same option) describe a mesh as
comma-separated `name=size` parts; one size may be `-1`, the devices the others leave.
Parsing the text is the command line's business; laying the devices out is core-graph's
`make_mesh` (through `jax.make_mesh`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import jax
from jax.sharding import Mesh

from bryo_graph import ShardingError, make_mesh

_AXIS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def parse_mesh_spec(spec: str, devices: Sequence[Any] | None = None) -> Mesh:
    """A `Mesh` from a spec such as `"data=4,model=2"` (as `bryo demo --mesh` takes).

    Args:
        spec: comma-separated `name=size` parts, in mesh order. One size may be `-1`: that
            axis takes the devices the others leave.
        devices: the devices to lay out (default `jax.devices()`, all processes' devices
            in a multi-process run). The mesh uses the first `prod(sizes)` of them.

    Returns:
        A `jax.sharding.Mesh` with those axis names and sizes.

    Raises:
        ShardingError: a malformed part (named in the message), a repeated name, or more
            devices asked for than there are.

    Example:
        >>> mesh = parse_mesh_spec("data=4,model=2")   # on 8 devices  # doctest: +SKIP
        >>> dict(mesh.shape)                                           # doctest: +SKIP
        {'data': 4, 'model': 2}
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ShardingError(
            f"`spec` must be a string of `name=size` parts such as 'data=4,model=2'; got {spec!r}."
        )
    axes: dict[str, int] = {}
    for part in spec.split(","):
        name, size = _parse_part(part, spec)
        if name in axes:
            raise ShardingError(f"the mesh spec {spec!r} names the axis {name!r} twice.")
        axes[name] = size
    devices = list(jax.devices() if devices is None else devices)
    return make_mesh(_fill_inferred(axes, len(devices), spec), devices=devices)


def _parse_part(part: str, spec: str) -> tuple[str, int]:
    name, sep, size_text = part.strip().partition("=")
    name, size_text = name.strip(), size_text.strip()
    if not sep or not _AXIS_NAME.match(name):
        raise ShardingError(
            f"the part {part.strip()!r} of the mesh spec {spec!r} is not `name=size` with a "
            "Python identifier as name (e.g. 'data=4')."
        )
    try:
        size = int(size_text)
    except ValueError:
        size = 0
    if size < 1 and size != -1:
        raise ShardingError(
            f"the part {part.strip()!r} of the mesh spec {spec!r} needs a positive integer size "
            "(or -1 for 'the remaining devices')."
        )
    return name, size


def _fill_inferred(axes: dict[str, int], n_devices: int, spec: str) -> dict[str, int]:
    inferred = [name for name, size in axes.items() if size == -1]
    if not inferred:
        return axes
    if len(inferred) > 1:
        raise ShardingError(
            f"the mesh spec {spec!r} has more than one size -1; at most one axis can be inferred."
        )
    known = math.prod(size for size in axes.values() if size != -1)
    if n_devices % known:
        raise ShardingError(
            f"the mesh spec {spec!r}: {n_devices} devices do not divide evenly by {known}, "
            f"so the axis {inferred[0]!r}=-1 cannot be inferred."
        )
    return {name: n_devices // known if size == -1 else size for name, size in axes.items()}
