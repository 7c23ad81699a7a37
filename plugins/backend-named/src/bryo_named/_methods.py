"""NamedArray's methods that mirror the module functions: `x.sum("Features")`,
`x.dot(w, axis="In")`, `x.rename({"In": "Out"})`, `x.rearrange("b t -> t b")`.

The functions live in `_ops` and `_rearrange`, which are built on `NamedArray`; they are
attached to the class here, one layer above, so `_named_array` imports nothing above
itself. The package's `__init__` imports this module: every NamedArray has the methods.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import _ops
from ._named_array import NamedArray
from ._rearrange import rearrange

# Each function takes the array first, so it is the method as it is.
MIRRORED: tuple[Callable[..., Any], ...] = (
    _ops.argmax,
    _ops.argmin,
    _ops.argsort,
    _ops.broadcast_axis,
    _ops.broadcast_to,
    _ops.cumprod,
    _ops.cumsum,
    _ops.trace,
    _ops.flatten_axes,
    _ops.unflatten_axis,
    _ops.ravel,
    _ops.flatten,
    _ops.split,
    _ops.repeat,
    _ops.tile,
    _ops.dot,
    _ops.rename,
    _ops.take,
    rearrange,
    _ops.sum,
    _ops.mean,
    _ops.max,
    _ops.min,
    _ops.prod,
    _ops.var,
    _ops.std,
    _ops.all,
    _ops.any,
)

for _function in MIRRORED:
    setattr(NamedArray, _function.__name__, _function)
