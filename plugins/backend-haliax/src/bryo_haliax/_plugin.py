"""The Haliax backend's hooks: `haliax.Axis` as a scan axis, `haliax.NamedArray` as a leaf
that carries its axes (scanned by name, stacked with a named axis in front), and its axis
names as logical axes for sharding rules."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import haliax
import jax

from bryo_plugins import hookimpl
from bryo_scan import AxisInfo, NamedLeaf, ScanAxisError

# Haliax's own test suites run against bryo.hax by registering it under the name `haliax`
# (`hatch run compat:haliax-scan`): the names are then bryo_named's own types, which its
# own plugin handles, and this backend has nothing to add.
REAL_HALIAX = haliax.NamedArray.__module__.partition(".")[0] == "haliax"


@hookimpl
def bryo_scan_resolve_axis(axis: object) -> AxisInfo | None:
    if REAL_HALIAX and isinstance(axis, haliax.Axis):
        return AxisInfo(name=axis.name, size=axis.size, spec=axis)
    return None


def _describe(leaf: haliax.NamedArray) -> str:
    axes = ", ".join(f"{axis.name}={axis.size}" for axis in leaf.axes)
    return f"haliax.NamedArray with axes ({axes})"


class HaliaxLeaf:
    """How core-scan takes a Haliax NamedArray apart along an axis and puts it back."""

    def unbind(
        self, leaf: haliax.NamedArray, axis: AxisInfo | None
    ) -> tuple[jax.Array, int | None, Callable[[jax.Array], haliax.NamedArray]]:
        axes = tuple(leaf.axes)
        position = self._position(leaf, axis)
        rest = axes if position is None else axes[:position] + axes[position + 1 :]
        return leaf.array, position, lambda array: haliax.NamedArray(array, rest)

    @staticmethod
    def _position(leaf: haliax.NamedArray, axis: AxisInfo | None) -> int | None:
        if axis is None:
            return None
        names = [a.name for a in leaf.axes]
        if axis.name is not None:
            if names.count(axis.name) > 1:
                raise ScanAxisError(f"{_describe(leaf)} has axis {axis.name!r} twice.")
            return names.index(axis.name) if axis.name in names else None
        position = axis.position if axis.position is not None else 0
        if not -len(names) <= position < len(names):
            raise ScanAxisError(
                f"positional axis {position} does not exist in {_describe(leaf)}; scan Haliax "
                "NamedArrays by axis name (a haliax.Axis or its name) instead."
            )
        return position % len(names)

    def bind(
        self, element: haliax.NamedArray, axis: AxisInfo, stacked: jax.Array
    ) -> haliax.NamedArray:
        if axis.name is None:
            raise ScanAxisError(
                f"cannot stack {_describe(element)} along {axis}: the new axis needs a name. "
                "Scan, vmap or stack over a named axis (a haliax.Axis) instead."
            )
        if axis.name in [a.name for a in element.axes]:
            raise ScanAxisError(
                f"cannot stack {_describe(element)} along {axis}: it has that axis already."
            )
        new_axes = (haliax.Axis(axis.name, stacked.shape[0]), *element.axes)
        return haliax.NamedArray(stacked, new_axes)

    def describe(self, leaf: haliax.NamedArray) -> str:
        return _describe(leaf)


_LEAF: NamedLeaf[haliax.NamedArray] = HaliaxLeaf()


@hookimpl
def bryo_scan_named_leaves() -> Mapping[type, NamedLeaf[haliax.NamedArray]]:
    return {haliax.NamedArray: _LEAF} if REAL_HALIAX else {}


@hookimpl
def bryo_graph_logical_axes() -> Mapping[type, Callable[[haliax.NamedArray], tuple[str, ...]]]:
    """A Haliax NamedArray's axis names are its logical axes for sharding rules."""
    return {haliax.NamedArray: _axis_names} if REAL_HALIAX else {}


def _axis_names(array: haliax.NamedArray) -> tuple[str, ...]:
    return tuple(axis.name for axis in array.axes)
