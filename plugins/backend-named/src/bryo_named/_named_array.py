"""`NamedArray`: a JAX array whose axes have names, registered as a pytree.

The array is the pytree child and the axes are static, so a NamedArray passes through
`jax.jit`, `grad` and `vmap` like any array. Binary operations line axes up by name, as
Haliax's do: one operand's axes must include the other's, and the result has that
operand's axes in its order. Python scalars and 0-d
arrays mix freely with NamedArrays; other unnamed arrays must be named first (`named`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, ParamSpec, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.tree_util import GetAttrKey, register_pytree_with_keys

from bryo_pytree import (
    ARITHMETIC_OPERATORS,
    COMPARISON_OPERATORS,
    UNARY_OPERATORS,
    forward_operators,
    is_array,
)

from ._axis import (
    Axis,
    AxisError,
    AxisSelector,
    Shape,
    axes_of,
    check_unique,
    dslice,
    format_axes,
    name_of,
)

Scalar = int | float | complex | bool

_NAMED_INDEXING_HELP = (
    "Index a NamedArray by axis name: arr['Time', 3], arr['Time', 2:5], "
    "arr['Time', 3, 'Features', 0] or arr[{'Time': 3}]."
)

P = ParamSpec("P")
R = TypeVar("R")


class NamedArray:
    """An array with named axes.

    Args:
        array: a JAX (or NumPy) array.
        axes: one `Axis` per dimension, as a sequence of `Axis` or a dict {name: size}.

    The methods mirroring the module functions (`sum`, `mean`, `argmax`, `dot`, `rename`,
    `take`, `rearrange`, ...) are attached by `bryo_named._methods`.

    Example:
        >>> x = NamedArray(jnp.ones((2, 3)), {"Batch": 2, "Features": 3})
        >>> x.shape
        {'Batch': 2, 'Features': 3}
        >>> (x + 1).sum("Features").shape
        {'Batch': 2}
    """

    __slots__ = ("array", "axes")
    __array_ufunc__ = None  # NumPy defers to our reflected operators
    __hash__ = None  # type: ignore[assignment]  # unhashable, as arrays are (the usual spelling)

    array: jax.Array
    axes: tuple[Axis, ...]

    def __init__(self, array: Any, axes: Shape) -> None:
        axes = axes_of(axes, "axes")
        if not isinstance(array, jax.Array):
            array = jnp.asarray(array)
        if tuple(array.shape) != tuple(a.size for a in axes):
            raise AxisError(
                f"`array` of shape {tuple(array.shape)} does not fit the axes "
                f"{format_axes(axes)}: give one axis per dimension with the same sizes."
            )
        object.__setattr__(self, "array", array)
        object.__setattr__(self, "axes", axes)

    @classmethod
    def _wrap(cls, array: Any, axes: tuple[Axis, ...]) -> NamedArray:
        """Build without checks (inside transformations the array may be a placeholder)."""
        obj = object.__new__(cls)
        object.__setattr__(obj, "array", array)
        object.__setattr__(obj, "axes", axes)
        return obj

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("NamedArray is immutable; build a new one instead.")

    # -- description --------------------------------------------------------------------

    @property
    def shape(self) -> dict[str, int]:
        """The axes as a dict {name: size}."""
        return {a.name: a.size for a in self.axes}

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes)

    @property
    def dtype(self) -> Any:
        return self.array.dtype

    @property
    def ndim(self) -> int:
        return len(self.axes)

    @property
    def size(self) -> int:
        return int(np.prod([a.size for a in self.axes], dtype=np.int64))

    def describe(self) -> str:
        """`NamedArray(float32, {'Time': 100, 'Features': 16})`, for messages."""
        return f"NamedArray({getattr(self.array, 'dtype', '?')}, {format_axes(self.axes)})"

    def __repr__(self) -> str:
        return f"NamedArray(axes={format_axes(self.axes)}, array={self.array!r})"

    # -- axes by name -------------------------------------------------------------------

    def axis_position(self, axis: AxisSelector) -> int | None:
        """The position of `axis` (a name or an `Axis`), or None when absent."""
        name = name_of(axis)
        for position, own in enumerate(self.axes):
            if own.name == name:
                return position
        return None

    def position_of(self, axis: AxisSelector, what: str = "axis") -> int:
        """The position of `axis`, or an `AxisError` naming it and listing the axes.

        An `Axis` (with its size) must also match the array's size of that axis.
        """
        position = self.axis_position(axis)
        if position is None:
            raise AxisError(
                f"`{what}`: axis {name_of(axis, what)!r} is not in this array; its axes are "
                f"{format_axes(self.axes)}."
            )
        if isinstance(axis, Axis) and axis.size != self.axes[position].size:
            raise AxisError(
                f"`{what}`: axis {axis.name!r} has size {self.axes[position].size} in this "
                f"array, not {axis.size}; its axes are {format_axes(self.axes)}."
            )
        return position

    def has_axis(self, axis: AxisSelector) -> bool:
        return self.axis_position(axis) is not None

    def resolve_axis(self, axis: AxisSelector) -> Axis:
        """The array's `Axis` of that name (with its size)."""
        return self.axes[self.position_of(axis)]

    def axis_size(self, axis: AxisSelector) -> int:
        return self.resolve_axis(axis).size

    # -- conversions --------------------------------------------------------------------

    def astype(self, dtype: Any) -> NamedArray:
        return NamedArray._wrap(self.array.astype(dtype), self.axes)

    def item(self) -> Any:
        return self.array.item()

    def scalar(self) -> jax.Array:
        """The value of an array without axes, as a 0-d JAX array (usable under `jit`).

        Example:
            >>> NamedArray(jnp.ones((2,)), {"Batch": 2}).sum().scalar()
            Array(2., dtype=float32)
        """
        if self.axes:
            raise AxisError(
                f"`scalar()` needs a NamedArray without axes; this one has "
                f"{format_axes(self.axes)}. Reduce those axes first, e.g. `x.sum()`."
            )
        return self.array

    def __float__(self) -> float:
        return float(self.array)

    def __int__(self) -> int:
        return int(self.array)

    def __bool__(self) -> bool:
        return bool(self.array)

    def __len__(self) -> int:
        raise TypeError(
            "a NamedArray has no first axis to take the length of; use "
            "`arr.axis_size(name)` or `arr.shape`."
        )

    def __iter__(self) -> Any:
        raise TypeError(
            "a NamedArray cannot be iterated without an axis; index by name "
            "(arr['Time', i]) or scan over the axis (hax.scan / hax.map)."
        )

    # -- indexing -----------------------------------------------------------------------

    def __getitem__(self, index: Any) -> NamedArray:
        return _index(self, _index_pairs(index))

    @property
    def at(self) -> NamedIndexUpdater:
        """Functional updates by axis name, as `jax.Array.at` (Haliax's `x.at[...]`).

        `x.at[{"H": 1}].set(y)` is `x` with `x[{"H": 1}]` replaced by `y`; `add`,
        `multiply` (`mul`), `divide`, `power`, `min`, `max` and `apply` combine instead,
        and `get` reads (with JAX's `mode=`/`fill_value=`). The index is the one of
        `x[...]`; the update is a scalar or a NamedArray whose axes are among the selection's
        (broadcast over the rest). Repeated indices all apply, as in JAX.

        Example:
            >>> x = NamedArray(jnp.zeros((2, 3)), {"H": 2, "W": 3})
            >>> x.at["H", 1].set(NamedArray(jnp.ones(3), {"W": 3})).array.tolist()
            [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]
        """
        return NamedIndexUpdater(self)


# The keys are `GetAttrKey`s, which jax declares as an `Any`-typed variable (not a type).
def _flatten_with_keys(x: NamedArray) -> tuple[list[tuple[Any, Any]], tuple[Axis, ...]]:
    return [(GetAttrKey("array"), x.array)], x.axes


def _flatten(x: NamedArray) -> tuple[list[Any], tuple[Axis, ...]]:
    return [x.array], x.axes


def _unflatten(axes: tuple[Axis, ...], children: Iterable[Any]) -> NamedArray:
    (array,) = children
    return NamedArray._wrap(array, axes)


register_pytree_with_keys(NamedArray, _flatten_with_keys, _unflatten, _flatten)

# A dslice's start may be traced (it is the pytree child); its size is static.
register_pytree_with_keys(
    dslice,
    lambda d: ([(GetAttrKey("start"), d.start)], d.size),
    lambda size, children: dslice(next(iter(children)), size),
    lambda d: ([d.start], d.size),
)


# -- broadcasting by name ------------------------------------------------------------------


def is_scalar_like(value: object) -> bool:
    """Python numbers and 0-d arrays: they broadcast against any NamedArray."""
    if isinstance(value, Scalar):
        return True
    return is_array(value) and np.ndim(value) == 0


def broadcast_axes(*arrays: NamedArray, what: str = "arrays") -> tuple[Axis, ...]:
    """The union of the arrays' axes, in order of first appearance; sizes must agree."""
    return union_axes([array.axes for array in arrays], what=what)


def union_axes(groups: Sequence[Sequence[Axis]], what: str = "arrays") -> tuple[Axis, ...]:
    """The union of several arrays' axes, in order of first appearance; sizes must agree."""
    seen: dict[str, Axis] = {}
    for axes in groups:
        for axis in axes:
            known = seen.setdefault(axis.name, axis)
            if known.size != axis.size:
                shapes = "; ".join(format_axes(group) for group in groups)
                raise AxisError(
                    f"`{what}`: axis {axis.name!r} has size {known.size} in one operand and "
                    f"{axis.size} in another (axes: {shapes}). Same-named axes must have "
                    "the same size; rename one of them or slice it."
                )
    return tuple(seen.values())


def elementwise_axes(arrays: Sequence[NamedArray], what: str = "arrays") -> tuple[Axis, ...]:
    """The axes of an elementwise result, by Haliax's rule: one operand's axes must include
    every other operand's; the result has that operand's axes, in its order.

    Arrays with unrelated axes (`{'Height'}` and `{'Width'}`, or `{'H', 'D'}` and
    `{'W', 'D'}`) are refused rather than broadcast to their union, as in Haliax: such a
    sum is more often a mistake than an outer product. Add the axes on purpose with
    `broadcast_axis`.
    """
    union = union_axes([array.axes for array in arrays], what=what)
    for array in arrays:
        if len(array.axes) == len(union):
            return array.axes
    widest = max(arrays, key=lambda array: len(array.axes))
    missing = tuple(a for a in union if not widest.has_axis(a.name))
    shapes = " and ".join(str(array.axis_names) for array in arrays)
    raise AxisError(
        f"`{what}`: no operand's axes include the others' ({shapes}); bryo.hax, like Haliax, "
        f"broadcasts only onto the operand with every axis. Add the missing axes on purpose, "
        f"e.g. `hax.broadcast_axis(x, {_spell_axes(missing)})` on the operand with axes "
        f"{widest.axis_names}, or rearrange/rename so one operand holds them all."
    )


def _spell_axes(axes: Sequence[Axis]) -> str:
    spelled = ", ".join(f"Axis({a.name!r}, {a.size})" for a in axes)
    return spelled if len(axes) == 1 else f"({spelled})"


def aligned(x: NamedArray, axes: Sequence[Axis]) -> jax.Array:
    """`x`'s array transposed to the order of `axes`, with size-1 dims for missing ones."""
    order = [x.position_of(a.name) for a in axes if x.has_axis(a.name)]
    array = x.array if order == list(range(x.ndim)) else jnp.transpose(x.array, order)
    shape = tuple(a.size if x.has_axis(a.name) else 1 for a in axes)
    return array if shape == array.shape else jnp.reshape(array, shape)


def raw_operand(value: object, axes: Sequence[Axis], what: str) -> Any:
    """A NamedArray aligned to `axes`, a scalar as it is, anything else an error."""
    if isinstance(value, NamedArray):
        return aligned(value, axes)
    if is_scalar_like(value) or value is None:
        return value
    value_shape = getattr(value, "shape", None)
    shape = tuple(value_shape) if value_shape is not None else type(value).__name__
    raise AxisError(
        f"`{what}`: cannot combine a NamedArray with an unnamed value of shape {shape}; "
        "name its axes first, e.g. hax.named(array, ('Time', ...)) or NamedArray(array, axes)."
    )


def elementwise(fn: Callable[..., Any], *args: Any, what: str | None = None, **kwargs: Any) -> Any:
    """Apply `fn` to arrays lined up by axis name; a NamedArray when any input is one.

    NamedArrays without axes are scalars: next to an unnamed array of any shape they
    give a plain array (as in Haliax), e.g. `jnp.arange(3) + x.sum()`.
    """
    named = [a for a in args if isinstance(a, NamedArray)]
    refuse_foreign(args, what or getattr(fn, "__name__", "operation"))
    if not named:
        return fn(*args, **kwargs)
    if not any(a.axes for a in named) and any(_is_unnamed(a) and np.ndim(a) for a in args):
        return fn(*(a.array if isinstance(a, NamedArray) else a for a in args), **kwargs)
    label = what or getattr(fn, "__name__", "operation")
    axes = elementwise_axes(named, what=label)
    raws = [raw_operand(a, axes, label) for a in args]
    return NamedArray._wrap(fn(*raws, **kwargs), axes)


def refusing_foreign(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn`, first refusing (`refuse_foreign`) a named array of another library among its
    positional arguments, or inside a list or tuple of them (`stack`'s arrays)."""
    what = fn.__name__

    @functools.wraps(fn)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        for arg in args:
            refuse_foreign(arg if isinstance(arg, list | tuple) else (arg,), what)
        return fn(*args, **kwargs)

    return checked


def refuse_foreign(values: Sequence[Any], what: str) -> None:
    """Raise if one of `values` is a named array of another library (Haliax's): bryo's
    functions would see its plain array and lose its names, so they refuse it instead."""
    for value in values:
        if not isinstance(value, NamedArray) and hasattr(value, "axes") and hasattr(value, "array"):
            cls = type(value)
            names = tuple(getattr(a, "name", a) for a in value.axes)
            raise AxisError(
                f"`{what}` got a {cls.__module__}.{cls.__qualname__} with axes {names}: bryo.hax "
                "takes bryo's NamedArray. Convert it with `bryo_haliax.from_haliax(x)` "
                "(bryo-backend-haliax), or call Haliax's own function on Haliax arrays."
            )


def _binary(fn: Callable[[Any, Any], Any], name: str) -> tuple[Callable, Callable]:
    def forward(self: NamedArray, other: Any) -> Any:
        if not (isinstance(other, NamedArray) or is_scalar_like(other) or _is_unnamed(other)):
            refuse_foreign((other,), name)  # a Haliax array: say to convert it, not Haliax's error
            return NotImplemented
        return elementwise(fn, self, other, what=name)

    def reflected(self: NamedArray, other: Any) -> Any:
        if not (is_scalar_like(other) or _is_unnamed(other)):
            return NotImplemented
        return elementwise(fn, other, self, what=name)

    return forward, reflected


def _is_unnamed(value: object) -> bool:
    return is_array(value)


_ARITHMETIC = {  # NamedArrays have no matmul and shifts: contract with `dot` over named axes
    name: op
    for name, op in ARITHMETIC_OPERATORS.items()
    if name not in ("matmul", "lshift", "rshift")
}
forward_operators(NamedArray, lambda name, fn: _binary(fn, name)[0], _ARITHMETIC)
forward_operators(NamedArray, lambda name, fn: _binary(fn, name)[1], _ARITHMETIC, prefix="r")
forward_operators(NamedArray, lambda name, fn: _binary(fn, name)[0], COMPARISON_OPERATORS)
forward_operators(
    NamedArray,
    lambda name, fn: lambda self: NamedArray._wrap(fn(self.array), self.axes),
    UNARY_OPERATORS,
)


# -- indexing ---------------------------------------------------------------------------


def _index_pairs(index: Any) -> list[tuple[Any, Any]]:
    if isinstance(index, tuple) and len(index) == 1:
        index = index[0]
    if isinstance(index, Mapping):
        return list(index.items())
    if isinstance(index, tuple) and len(index) % 2 == 0 and index:
        pairs = list(zip(index[::2], index[1::2], strict=True))
        if all(isinstance(name, str | Axis) for name, _ in pairs):
            return pairs
    raise AxisError(f"cannot index a NamedArray with {index!r}. {_NAMED_INDEXING_HELP}")


class IndexPlan(NamedTuple):
    """How to index an array: one raw selector per dimension, the result's axes, and
    whether to read with `mode="fill"` (a `dslice` may run past the end)."""

    selectors: tuple[Any, ...]
    axes: tuple[Axis, ...]
    fill: bool


def plan_index(x: NamedArray, pairs: Sequence[tuple[Any, Any]]) -> IndexPlan:
    """Haliax's indexing rules, resolved to a NumPy-style index and the result's axes.

    Slices keep their axis (resized); integers drop it. NamedArrays of integer indices
    ("advanced" indices; a `dslice` and a 1-d unnamed array are turned into one, named
    after the axis they index) are broadcast together by name, and their axes replace the
    indexed ones: in place when the indexed axes (integers included) are adjacent, in
    front otherwise, as in NumPy. An index axis that is also a remaining axis of `x` pairs
    up with it, one element per position.
    """
    selectors: list[Any] = [slice(None)] * x.ndim
    kept_axes: list[Axis | None] = list(x.axes)
    gathers: dict[int, NamedArray] = {}
    fill = False
    seen: set[int] = set()
    for axis, selector in pairs:
        position = x.position_of(axis, "index")
        own = x.axes[position]
        if position in seen:
            raise AxisError(
                f"axis {own.name!r} is indexed twice; give each axis one index. "
                f"{_NAMED_INDEXING_HELP}"
            )
        seen.add(position)
        if isinstance(selector, slice):
            selectors[position] = selector
            kept_axes[position] = own.resize(len(range(*selector.indices(own.size))))
            continue
        kept_axes[position] = None
        if isinstance(selector, dslice):
            start = jnp.asarray(selector.start)
            gathers[position] = NamedArray._wrap(
                jnp.arange(selector.size, dtype=start.dtype) + start, (own.resize(selector.size),)
            )
            fill = True
        elif _is_integer_scalar(selector):
            selectors[position] = _checked_scalar(x, position, selector)
        else:
            gathers[position] = _index_array(x, position, selector)
    if not gathers:
        return IndexPlan(tuple(selectors), tuple(a for a in kept_axes if a is not None), fill)
    _pair_shared_axes(x, kept_axes, gathers)
    index_axes = _index_axes([g.axes for g in gathers.values()])
    for position, gather in gathers.items():
        sizes = tuple(a.size for a in index_axes)
        selectors[position] = jnp.broadcast_to(aligned(gather, index_axes), sizes)
    indexed = [i for i, kept in enumerate(kept_axes) if kept is None]
    remaining = [a for a in kept_axes if a is not None]
    if indexed == list(range(indexed[0], indexed[-1] + 1)):  # adjacent: in place
        before = [a for a in kept_axes[: indexed[0]] if a is not None]
        axes = (*before, *index_axes, *remaining[len(before) :])
    else:
        axes = (*index_axes, *remaining)
    return IndexPlan(tuple(selectors), check_unique(axes, "index"), fill)


def _checked_scalar(x: NamedArray, position: int, selector: Any) -> Any:
    size = x.axes[position].size
    if isinstance(selector, int | np.integer) or type(selector) is np.ndarray:
        selector = int(selector)
        if not -size <= selector < size:
            raise IndexError(
                f"index {selector} is out of range for axis {x.axes[position].name!r} "
                f"of size {size} (axes {format_axes(x.axes)})."
            )
    return selector


def _index_array(x: NamedArray, position: int, selector: Any) -> NamedArray:
    """An index array as a NamedArray of integers; a 1-d unnamed one (or a list) is named
    after the axis it indexes."""
    own = x.axes[position]
    refuse_foreign((selector,), "index")  # a Haliax index array: say to convert it
    if not isinstance(selector, NamedArray):
        if isinstance(selector, list | tuple) or (is_array(selector) and np.ndim(selector) == 1):
            values = jnp.asarray(selector)
            if values.ndim == 1:
                selector = NamedArray._wrap(values, (own.resize(values.shape[0]),))
    if not isinstance(selector, NamedArray):
        shape = getattr(selector, "shape", None)
        what = f"an unnamed array of shape {tuple(shape)}" if shape is not None else repr(selector)
        raise AxisError(
            f"axis {own.name!r}: cannot index by {what}. Use an int, a slice, hax.ds(start, "
            "size), a 1-d integer array, or a NamedArray of integer indices (name the "
            f"dimensions of a many-dimensional index: hax.named(idx, ('Batch', 'Pick'))). "
            f"{_NAMED_INDEXING_HELP}"
        )
    if not jnp.issubdtype(selector.dtype, jnp.integer):
        raise AxisError(
            f"axis {own.name!r}: an index array must hold integers; got dtype {selector.dtype} "
            f"(axes {format_axes(selector.axes)}). Cast it with `.astype(jnp.int32)`, or use "
            "hax.where to select by a boolean mask."
        )
    return selector


def _pair_shared_axes(
    x: NamedArray, kept_axes: list[Axis | None], gathers: dict[int, NamedArray]
) -> None:
    """Axes of `x` that an index array also has are indexed position by position (an arange
    over the axis), so that the index's values along the axis pair with the array's."""
    named_in_index = {a.name: a for gather in gathers.values() for a in gather.axes}
    for position, kept in enumerate(kept_axes):
        if kept is None or kept.name not in named_in_index:
            continue
        if named_in_index[kept.name].size != x.axes[position].size:
            raise AxisError(
                f"axis {kept.name!r} has size {named_in_index[kept.name].size} in an index "
                f"array but {x.axes[position].size} in the array ({format_axes(x.axes)}); an "
                "index axis named like an axis of the array pairs with it element by element, "
                "so give it the same size, or rename it."
            )
        if kept != x.axes[position]:
            raise AxisError(
                f"axis {kept.name!r} is sliced and also an axis of an index array; an index "
                "array's axis pairs element by element with the whole axis of the same name. "
                "Slice the index array too, or rename its axis."
            )
        gathers[position] = NamedArray._wrap(jnp.arange(kept.size), (kept,))
        kept_axes[position] = None


def _index_axes(groups: Sequence[tuple[Axis, ...]]) -> tuple[Axis, ...]:
    """The axes the index arrays broadcast to, in Haliax's order: the largest index first
    keeps its order, and each smaller one's new axes go in front."""
    union_axes(groups, what="index")  # same-named axes must agree in size
    ordered = sorted(groups, key=_size, reverse=True)
    result = ordered[0]
    for axes in ordered[1:]:
        big, small = (result, axes) if _size(result) >= _size(axes) else (axes, result)
        names = {a.name for a in big}
        result = (*(a for a in small if a.name not in names), *big)
    return result


def _size(axes: Sequence[Axis]) -> int:
    return math.prod(a.size for a in axes)


def _index(x: NamedArray, pairs: list[tuple[Any, Any]]) -> NamedArray:
    plan = plan_index(x, pairs)
    if plan.fill:
        array = x.array.at[plan.selectors].get(mode="fill", fill_value=0)
    else:
        array = x.array[plan.selectors]
    return NamedArray(array, plan.axes)


@refusing_foreign
def index(array: NamedArray, slices: Mapping[AxisSelector, Any]) -> NamedArray:
    """`array[slices]`: select by axis name with ints, slices, `ds(start, size)`, 1-d
    integer arrays or NamedArrays of integer indices (Haliax's `hax.index`).

    Example:
        >>> x = NamedArray(jnp.arange(6).reshape(2, 3), {"H": 2, "W": 3})
        >>> picks = NamedArray(jnp.array([2, 0]), {"Pick": 2})
        >>> index(x, {"H": 1, "W": picks}).shape
        {'Pick': 2}
    """
    return _index(array, _index_pairs(slices))


class NamedIndexUpdater:
    """`x.at`: index it (`x.at["H", 1]`) to get a `NamedIndexUpdate`."""

    __slots__ = ("_array",)

    def __init__(self, array: NamedArray) -> None:
        self._array = array

    def __getitem__(self, index: Any) -> NamedIndexUpdate:
        return NamedIndexUpdate(self._array, _index_pairs(index))


class NamedIndexUpdate:
    """`x.at[index]`: the methods return `x` updated at `index` (a new NamedArray).

    The keywords `indices_are_sorted`, `unique_indices` and `mode` are JAX's (see
    `jax.numpy.ndarray.at`); writes through a `dslice` past the end are dropped.
    """

    __slots__ = ("_array", "_plan")

    def __init__(self, array: NamedArray, pairs: list[tuple[Any, Any]]) -> None:
        self._array = array
        self._plan = plan_index(array, pairs)

    def get(
        self,
        *,
        indices_are_sorted: bool = False,
        unique_indices: bool = False,
        mode: str | None = None,
        fill_value: Any = None,
    ) -> NamedArray:
        """`x[index]`, with JAX's out-of-bounds `mode` and `fill_value`."""
        read = self._array.array.at[self._plan.selectors].get(
            indices_are_sorted=indices_are_sorted,
            unique_indices=unique_indices,
            mode=mode,
            fill_value=fill_value,
        )
        return NamedArray(read, self._plan.axes)

    def set(self, update: Any, **options: Any) -> NamedArray:
        """`x[index] = update`."""
        return self._scatter("set", update, options)

    def add(self, update: Any, **options: Any) -> NamedArray:
        """`x[index] += update`."""
        return self._scatter("add", update, options)

    def multiply(self, update: Any, **options: Any) -> NamedArray:
        """`x[index] *= update`."""
        return self._scatter("multiply", update, options)

    mul = multiply

    def divide(self, update: Any, **options: Any) -> NamedArray:
        """`x[index] /= update`."""
        return self._scatter("divide", update, options)

    def power(self, update: Any, **options: Any) -> NamedArray:
        """`x[index] **= update`."""
        return self._scatter("power", update, options)

    def min(self, update: Any, **options: Any) -> NamedArray:
        """`x[index] = minimum(x[index], update)`."""
        return self._scatter("min", update, options)

    def max(self, update: Any, **options: Any) -> NamedArray:
        """`x[index] = maximum(x[index], update)`."""
        return self._scatter("max", update, options)

    def apply(self, func: Callable[[Any], Any], **options: Any) -> NamedArray:
        """`func` applied to each selected element (a scalar function, as in JAX)."""
        at = self._array.array.at[self._plan.selectors]
        updated = at.apply(func, **_scatter_options(options))
        return NamedArray._wrap(updated, self._array.axes)

    def _scatter(self, method: str, update: Any, options: dict[str, Any]) -> NamedArray:
        values = _update_values(update, self._plan.axes, f"at[...].{method}")
        scatter = getattr(self._array.array.at[self._plan.selectors], method)
        updated = scatter(values, **_scatter_options(options))
        return NamedArray._wrap(updated, self._array.axes)


_SCATTER_OPTIONS = ("indices_are_sorted", "unique_indices", "mode")


def _scatter_options(options: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - set(_SCATTER_OPTIONS))
    if unknown:
        raise TypeError(
            f"`x.at[...]` updates take the keywords {list(_SCATTER_OPTIONS)}; got {unknown}."
        )
    return options


def _update_values(update: Any, axes: tuple[Axis, ...], what: str) -> Any:
    """`update` as a raw array laid out on `axes`: a scalar as it is, a NamedArray
    aligned and broadcast by name (it may lack axes, not have extra ones)."""
    if not isinstance(update, NamedArray):
        return raw_operand(update, axes, what)
    by_name = {a.name: a for a in axes}
    for axis in update.axes:
        target = by_name.get(axis.name)
        if target is None:
            raise AxisError(
                f"`{what}`: the update's axis {axis.name!r} is not an axis of the selection "
                f"{format_axes(axes)} (update axes {format_axes(update.axes)}); rename it, "
                "or reduce it first."
            )
        if target.size != axis.size:
            raise AxisError(
                f"`{what}`: axis {axis.name!r} has size {axis.size} in the update but "
                f"{target.size} in the selection {format_axes(axes)}; slice one to fit."
            )
    return jnp.broadcast_to(aligned(update, axes), tuple(a.size for a in axes))


def _is_integer_scalar(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | np.integer):
        return True
    return is_array(value) and np.ndim(value) == 0 and jnp.issubdtype(value.dtype, jnp.integer)


@refusing_foreign
def named(array: Any, axis: Shape | Sequence[AxisSelector] | AxisSelector) -> NamedArray:
    """Name the axes of a plain array: `named(jnp.ones((2, 3)), ("Batch", "Features"))`.

    Axes may be bare names here (the sizes come from the array). The parameter is called
    `axis`, as in Haliax (`named(values, axis=Batch)`).
    """
    axes = axis
    array = array if isinstance(array, jax.Array) else jnp.asarray(array)
    if isinstance(axes, str | Axis):
        axes = (axes,)
    if isinstance(axes, Sequence) and all(isinstance(a, str | Axis) for a in axes):
        if len(axes) != array.ndim:
            raise AxisError(
                f"`axes` {tuple(axes)!r} name {len(axes)} dimensions but the array has shape "
                f"{tuple(array.shape)}; give one name per dimension."
            )
        axes = [
            a if isinstance(a, Axis) else Axis(a, n) for a, n in zip(axes, array.shape, strict=True)
        ]
        check_unique(axes, "axes")
    return NamedArray(array, axes)  # type: ignore[arg-type]  # otherwise `axes` is already a Shape: NamedArray checks it
