"""Axes: a name and a size. Every operation finds an array's axes by name.

Shapes are written as dicts (`{"Time": 100, "Features": 16}`), a single `Axis`, or a
sequence of `Axis`. `axis_sizes` declares sizes for bare names in a block, so that a scan
over `"Time"` with no inputs knows how long to run.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import operator
import types
from collections.abc import Iterator, Mapping, Sequence


class AxisError(ValueError):
    """An axis that is missing, duplicated, of the wrong size, or not an axis at all."""


@dataclasses.dataclass(frozen=True)
class Axis:
    """A named axis with a size, e.g. `Axis("Layers", 12)`.

    An `Axis` converts to its size where Python wants an int, so
    `jax.random.split(key, Layers)` makes one key per layer.

    Example:
        >>> Time = Axis("Time", 100)
        >>> Time.size, Time.resize(10)
        (100, Axis(name='Time', size=10))
    """

    name: str
    size: int

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise AxisError(f"an axis `name` must be a non-empty string; got {self.name!r}.")
        try:
            size = operator.index(self.size)
        except TypeError:
            raise AxisError(
                f"axis {self.name!r}: `size` must be an integer; got {self.size!r}."
            ) from None
        if size < 0:
            raise AxisError(f"axis {self.name!r}: `size` must be >= 0; got {size}.")
        object.__setattr__(self, "size", size)

    def __index__(self) -> int:
        return self.size

    def resize(self, size: int) -> Axis:
        """The same name with another size."""
        return Axis(self.name, size)

    def alias(self, name: str) -> Axis:
        """Another name with the same size."""
        return Axis(name, self.size)


class dslice:
    """A dynamic slice: `size` elements from `start` along one axis (Haliax's `hax.ds`).

    A Python slice needs static bounds under `jax.jit`; a `dslice` takes a traced `start`
    with a static `size`: `x["Seq", ds(i, 16)]`. Reading past the end of the axis gives 0
    for the missing elements, and writes there (`x.at["Seq", ds(i, 16)].set(...)`) are
    dropped, as in Haliax. `length` may be an `Axis` (its size is used).

    Example:
        >>> dslice(3, 4), dslice.block(2, 4).start
        (dslice(start=3, size=4), 8)
    """

    __slots__ = ("size", "start")

    start: object
    size: int

    def __init__(self, start: object, length: int | Axis) -> None:
        size = length.size if isinstance(length, Axis) else length
        try:
            size = operator.index(size)
        except TypeError:
            raise AxisError(
                f"`length` of a dslice must be a static int or an Axis; got {length!r}. The "
                "start may be traced under jit, the size may not."
            ) from None
        if size < 0:
            raise AxisError(f"`length` of a dslice must be >= 0; got {size}.")
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "size", size)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("dslice is immutable; build a new one instead.")

    def __repr__(self) -> str:
        return f"dslice(start={self.start!r}, size={self.size})"

    def to_slice(self) -> slice:
        """The Python slice `start:start + size` (for a static start)."""
        return slice(self.start, self.start + self.size)  # type: ignore[operator]

    @staticmethod
    def block(idx: object, size: int) -> dslice:
        """Block `idx` of blocks of `size` elements: `dslice(idx * size, size)`."""
        return dslice(idx * size, size)  # type: ignore[operator]


ds = dslice
"""Haliax's short name for `dslice`."""


def dblock(idx: object, size: int) -> dslice:
    """Block `idx` of blocks of `size` elements: `dslice(idx * size, size)`."""
    return dslice.block(idx, size)


AxisSelector = Axis | str
"""An axis by name: an `Axis` (its size is checked where it matters) or its name."""

AxisSelection = AxisSelector | Sequence[AxisSelector]
"""One axis or several."""

Shape = Mapping[str, int] | Axis | Sequence[Axis]
"""A shape: `{"Time": 100}`, `Axis("Time", 100)` or `(Axis("Time", 100), ...)`."""

AxisSpec = Shape
"""Haliax's name for a `Shape`."""


def make_axes(**sizes: int) -> tuple[Axis, ...]:
    """One `Axis` per keyword, in order: `Height, Width = make_axes(Height=2, Width=3)`."""
    return tuple(Axis(name, size) for name, size in sizes.items())


def axis_name(axis: AxisSelection) -> str | tuple[str, ...]:
    """The name of an axis, or the names of several (Haliax's `haliax.axis.axis_name`)."""
    return name_of(axis) if isinstance(axis, Axis | str) else names_of(axis)


def axis_spec_to_shape_dict(spec: AxisSelection | Mapping[str, int]) -> dict[str, int | None]:
    """`{name: size}` of one axis or several; a bare name has size None (as in Haliax)."""
    if isinstance(spec, Mapping):
        return {name_of(name, "axis"): size for name, size in spec.items()}
    selectors = (spec,) if isinstance(spec, Axis | str) else tuple(spec)
    names_of(selectors)  # validates
    shape: dict[str, int | None] = {}
    for selector in selectors:
        shape[name_of(selector)] = selector.size if isinstance(selector, Axis) else None
    return shape


def axis_spec_to_tuple(spec: AxisSelection | Mapping[str, int]) -> tuple[AxisSelector, ...]:
    """One axis or several as a tuple: `Axis`es, bare names where no size is known."""
    return tuple(
        name if size is None else Axis(name, size)
        for name, size in axis_spec_to_shape_dict(spec).items()
    )


def name_of(selector: object, what: str = "axis") -> str:
    """The name of an axis selector (`"Time"` or `Axis("Time", 100)`)."""
    if isinstance(selector, Axis):
        return selector.name
    if isinstance(selector, str):
        return selector
    raise AxisError(f"`{what}` must be an axis name or an Axis; got {selector!r}.")


def names_of(selection: object, what: str = "axis") -> tuple[str, ...]:
    """The names of one selector or of a sequence of them."""
    if isinstance(selection, Axis | str):
        return (name_of(selection, what),)
    if isinstance(selection, Sequence):
        return tuple(name_of(s, what) for s in selection)
    raise AxisError(f"`{what}` must be an axis, a name or a sequence of them; got {selection!r}.")


def format_axes(axes: Sequence[Axis]) -> str:
    """`{'Time': 100, 'Features': 16}`: how error messages list an array's axes."""
    return "{" + ", ".join(f"{a.name!r}: {a.size}" for a in axes) + "}"


def check_unique(axes: Sequence[Axis], what: str) -> tuple[Axis, ...]:
    """`axes` as a tuple, or an `AxisError` naming the duplicated axis."""
    seen: set[str] = set()
    for axis in axes:
        if axis.name in seen:
            raise AxisError(
                f"`{what}`: axis {axis.name!r} appears twice in {format_axes(axes)}; "
                "each axis name may appear once per array (rename one of them)."
            )
        seen.add(axis.name)
    return tuple(axes)


def _from_other_library(value: object) -> Axis | None:
    """An axis of another library with a string `name` and an int `size` (a
    `haliax.Axis`) as bryo's `Axis`; None for anything else."""
    name, size = getattr(value, "name", None), getattr(value, "size", None)
    if isinstance(name, str) and isinstance(size, int) and not isinstance(size, bool):
        return Axis(name, size)
    return None


def axes_of(shape: object, what: str = "shape") -> tuple[Axis, ...]:
    """Normalize a `Shape` into a tuple of `Axis`, checking names are unique. Axes of
    another library (`haliax.Axis`) count as bryo's, by name and size."""
    if isinstance(shape, Axis):
        return (shape,)
    if isinstance(shape, Mapping):
        return check_unique([Axis(name, size) for name, size in shape.items()], what)
    other = _from_other_library(shape)
    if other is not None:
        return (other,)
    if isinstance(shape, Sequence) and not isinstance(shape, str):
        shape = [a if isinstance(a, Axis) else (_from_other_library(a) or a) for a in shape]
        bad = [a for a in shape if not isinstance(a, Axis)]
        if bad:
            raise AxisError(
                f"`{what}` must hold Axis objects (a bare name has no size); got {bad[0]!r}. "
                "Write Axis(name, size) or a dict {name: size}."
            )
        return check_unique(list(shape), what)
    raise AxisError(
        f"`{what}` must be a dict {{name: size}}, an Axis or a sequence of Axis; got {shape!r}."
    )


_NO_SIZES: Mapping[str, int] = types.MappingProxyType({})
_declared_sizes: contextvars.ContextVar[Mapping[str, int]] = contextvars.ContextVar(
    "bryo_named_axis_sizes", default=_NO_SIZES
)


@contextlib.contextmanager
def axis_sizes(sizes: Mapping[str, int] | None = None, /, **more: int) -> Iterator[None]:
    """Declare sizes for axis names inside the block (nested blocks add to them).

    Scans over a bare name with no inputs (`scan(f, "Time")(init, None)`) take their
    length from here.

    Example:
        >>> with axis_sizes(Time=100):
        ...     pass
    """
    merged = {**_declared_sizes.get(), **(sizes or {}), **more}
    for name, size in merged.items():
        Axis(name, size)  # validates
    token = _declared_sizes.set(merged)
    try:
        yield
    finally:
        _declared_sizes.reset(token)


def declared_size(name: str) -> int | None:
    """The size declared for `name` by an enclosing `axis_sizes`, if any."""
    return _declared_sizes.get().get(name)


def order_by_partial(order: Sequence[object], axes: Sequence[Axis], what: str) -> tuple[Axis, ...]:
    """`axes` rearranged to follow `order`: axes (names or `Axis`) and `...` (any number).

    Without `...`, `order` must list every axis. With it, the listed axes keep their
    relative order and each unlisted axis lands in the first `...` after the listed axes
    that come before it in `axes` and not yet holding axes (as close to its old place as
    the order allows; Haliax's `rearrange_for_partial_order` heuristic):
    `(..., "D", ...)` keeps `(H, W, D)` as it is, `(..., "D", "H", ...)` makes `(D, H, W)`.
    """
    by_name = {axis.name: axis for axis in axes}
    listed = [name_of(item, what) for item in order if item is not Ellipsis]
    twice = sorted({name for name in listed if listed.count(name) > 1})
    if twice:
        raise AxisError(
            f"`{what}`: axis {twice[0]!r} appears twice in {tuple(order)!r}; list each axis once."
        )
    missing = [name for name in listed if name not in by_name]
    if missing:
        raise AxisError(
            f"`{what}`: {missing} of {tuple(order)!r} are not among the axes {format_axes(axes)}."
        )
    if Ellipsis not in order:
        if len(listed) != len(axes):
            left_out = [a.name for a in axes if a.name not in listed]
            raise AxisError(
                f"`{what}` {tuple(listed)} leaves out {left_out} of {format_axes(axes)}; "
                "list every axis or add `...` for the others."
            )
        return tuple(by_name[name] for name in listed)
    slots: list[list[str]] = [[] if item is Ellipsis else [name_of(item)] for item in order]
    gaps = [i for i, item in enumerate(order) if item is Ellipsis]
    home = {name: i for i, slot in enumerate(slots) for name in slot}
    target = gaps[0]
    for axis in axes:
        if axis.name in home:
            start = max(home[axis.name] + 1, target)
            unused = [gap for gap in gaps if gap >= start and not slots[gap]]
            target = unused[0] if unused else target
        else:
            slots[target].append(axis.name)
    return tuple(by_name[name] for slot in slots for name in slot)
