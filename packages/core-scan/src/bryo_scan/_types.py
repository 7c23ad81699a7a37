"""The small vocabulary shared by core-scan and the backends that plug into it.

`AxisInfo` is what an axis spec (an int, a name, an `Axis`) resolves to; `NamedLeaf` is
what a backend implements for a leaf type that carries its own axes (a `NamedArray`), and
`BlockSplitter` turns a backend's block into a pytree and back so that it can be stacked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

import jax

PyTree = Any


class ScanAxisError(ValueError):
    """An axis spec that cannot be resolved, or inputs whose axis is missing or mis-sized."""


class ScanOutputError(ValueError, TypeError):
    """A scanned function or block returned something other than a `(carry, output)` pair.

    Both a `ValueError` (what Haliax raises) and a `TypeError` (what it is).
    """


class OffloadUnavailableError(RuntimeError):
    """A checkpoint policy asks to offload to host memory on a device that cannot."""


@dataclasses.dataclass(frozen=True)
class AxisInfo:
    """An axis spec resolved: a `name` (named axes) or a `position` (positional axes).

    Attributes:
        name: the axis name, or None for a positional axis.
        size: the axis size when the spec carries one (an `Axis("Time", 100)`), else None.
        position: for positional axes, the index of the axis in every plain array.
        spec: the spec as the user wrote it, for error messages.
    """

    name: str | None
    size: int | None
    position: int | None = None
    spec: object = None

    def __str__(self) -> str:
        if self.name is None:
            return f"positional axis {self.position}"
        size = "" if self.size is None else f" (size {self.size})"
        return f"axis {self.name!r}{size}"


Rebuild = Callable[[jax.Array], object]

LeafT = TypeVar("LeafT", contravariant=True)
"""The leaf type a `NamedLeaf` handles (core-scan only passes it leaves of its registered type)."""


@runtime_checkable
class NamedLeaf(Protocol[LeafT]):
    """How core-scan takes apart and puts together a backend leaf that carries axes.

    Registered per leaf type through the `bryo_scan_named_leaves` hook. Such leaves are
    treated as single leaves when core-scan flattens inputs and outputs.
    """

    def unbind(self, leaf: LeafT, axis: AxisInfo | None) -> tuple[jax.Array, int | None, Rebuild]:
        """Split `leaf` into its raw array, the position of `axis` in it, and a rebuild.

        The position is None when `axis` is None or the leaf lacks that axis; the
        rebuild then wraps an array of the leaf's own shape, otherwise an array with
        that axis removed (one slice). Raise for a spec the leaf cannot hold (for
        example an axis present twice).
        """
        ...

    def bind(self, element: LeafT, axis: AxisInfo, stacked: jax.Array) -> object:
        """Wrap `stacked`, copies of `element`'s array stacked on a new leading axis.

        Only `element`'s static description may be used (its array can be a tracer of
        a finished trace). Raise when `axis` has no name the leaf could carry.
        """
        ...

    def describe(self, leaf: LeafT) -> str:
        """A short description naming the leaf's axes, for error messages."""
        ...


BlockSplitter = Callable[[object], tuple[PyTree, Callable[[PyTree], object]]]
"""`split(block) -> (pytree, rebuild)`: a block as a pytree of arrays, and the way back."""
