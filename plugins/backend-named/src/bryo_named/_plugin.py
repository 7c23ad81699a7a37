"""bryo_named's plugin: names and `Axis` objects as scan axes, NamedArray as a named leaf."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import jax

from bryo_plugins import hookimpl
from bryo_scan import AxisInfo, NamedLeaf

from ._axis import Axis, AxisError, check_unique, declared_size, format_axes
from ._named_array import NamedArray


@hookimpl
def bryo_scan_resolve_axis(axis: object) -> AxisInfo | None:
    if isinstance(axis, Axis):
        return AxisInfo(name=axis.name, size=axis.size, spec=axis)
    if isinstance(axis, str):
        return AxisInfo(name=axis, size=declared_size(axis), spec=axis)
    return None


class NamedArrayLeaf:
    """How core-scan takes a NamedArray apart along an axis and puts it back."""

    def unbind(
        self, leaf: NamedArray, axis: AxisInfo | None
    ) -> tuple[jax.Array, int | None, Callable[[jax.Array], NamedArray]]:
        position = self._position(leaf, axis)
        if position is None:
            return leaf.array, None, lambda array: NamedArray._wrap(array, leaf.axes)
        rest = leaf.axes[:position] + leaf.axes[position + 1 :]
        return leaf.array, position, lambda array: NamedArray._wrap(array, rest)

    @staticmethod
    def _position(leaf: NamedArray, axis: AxisInfo | None) -> int | None:
        if axis is None:
            return None
        if axis.name is not None:
            return leaf.axis_position(axis.name)
        position = axis.position if axis.position is not None else 0
        if not -leaf.ndim <= position < leaf.ndim:
            raise AxisError(
                f"positional axis {position} does not exist in {leaf.describe()}; "
                "scan NamedArrays by axis name instead."
            )
        return position % leaf.ndim

    def bind(self, element: NamedArray, axis: AxisInfo, stacked: jax.Array) -> NamedArray:
        if axis.name is None:
            raise AxisError(
                f"cannot stack NamedArray outputs ({element.describe()}) along {axis}: the new "
                "axis needs a name. Scan or vmap over a named axis (e.g. 'Time') instead."
            )
        new_axes = (Axis(axis.name, stacked.shape[0]), *element.axes)
        return NamedArray._wrap(stacked, check_unique(new_axes, "outputs"))

    def describe(self, leaf: NamedArray) -> str:
        return f"NamedArray with axes {format_axes(leaf.axes)}"


_LEAF: NamedLeaf[NamedArray] = NamedArrayLeaf()


@hookimpl
def bryo_scan_named_leaves() -> Mapping[type, NamedLeaf[NamedArray]]:
    return {NamedArray: _LEAF}


@hookimpl
def bryo_graph_logical_axes() -> Mapping[type, Callable[[NamedArray], tuple[str, ...]]]:
    """A NamedArray's axis names are its logical axes for sharding (Haliax-style)."""
    return {NamedArray: _axis_names}


def _axis_names(array: NamedArray) -> tuple[str, ...]:
    return array.axis_names
