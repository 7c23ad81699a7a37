"""core-scan's built-in plugin: ints (and NumPy integers) are positional axes."""

from __future__ import annotations

import operator

import numpy as np

from bryo_pytree import hookimpl

from ._types import AxisInfo


@hookimpl(trylast=True)
def bryo_scan_resolve_axis(axis: object) -> AxisInfo | None:
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer):
        return None
    return AxisInfo(name=None, size=None, position=operator.index(axis), spec=axis)
