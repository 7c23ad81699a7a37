"""`NamedArray`: a JAX array whose axes have names, registered as a pytree.

The array is the pytree child and the axes are static, so a NamedArray passes through
`jax.jit`, `grad` and `vmap` like any array. Binary operations line axes up by name, as
Haliax's do: one operand's axes must include the other's, and the result has that
operand's axes in its order. Python scalars and 0-d
arrays mix freely with NamedArrays; other unnamed arrays must be named first (`named`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

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

from ._axis import Axis, AxisError, AxisSelector, Shape, axes_of, check_unique, format_axes, name_of

Scalar = int | float | complex | bool

_NAMED_INDEXING_HELP = (
    "Index a NamedArray by axis name: arr['Time', 3], arr['Time', 2:5], "
    "arr['Time', 3, 'Features', 0] or arr[{'Time': 3}]."
)


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


# The keys are `GetAttrKey`s, which jax declares as an `Any`-typed variable (not a type).
def _flatten_with_keys(x: NamedArray) -> tuple[list[tuple[Any, Any]], tuple[Axis, ...]]:
    return [(GetAttrKey("array"), x.array)], x.axes


def _flatten(x: NamedArray) -> tuple[list[Any], tuple[Axis, ...]]:
    return [x.array], x.axes


def _unflatten(axes: tuple[Axis, ...], children: Iterable[Any]) -> NamedArray:
    (array,) = children
    return NamedArray._wrap(array, axes)


register_pytree_with_keys(NamedArray, _flatten_with_keys, _unflatten, _flatten)


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
    if isinstance(index, Mapping):
        return list(index.items())
    if isinstance(index, tuple) and len(index) % 2 == 0 and index:
        pairs = list(zip(index[::2], index[1::2], strict=True))
        if all(isinstance(name, str | Axis) for name, _ in pairs):
            return pairs
    raise AxisError(f"cannot index a NamedArray with {index!r}. {_NAMED_INDEXING_HELP}")


def _index(x: NamedArray, pairs: list[tuple[Any, Any]]) -> NamedArray:
    selectors: list[Any] = [slice(None)] * x.ndim
    new_axes: list[Axis | None] = list(x.axes)
    for axis, selector in pairs:
        position = x.position_of(axis, "index")
        size = x.axes[position].size
        if isinstance(selector, slice):
            selectors[position] = selector
            new_axes[position] = x.axes[position].resize(len(range(*selector.indices(size))))
        elif _is_integer_scalar(selector):
            if isinstance(selector, int | np.integer) and not -size <= selector < size:
                raise IndexError(
                    f"index {selector} is out of range for axis {x.axes[position].name!r} "
                    f"of size {size} (axes {format_axes(x.axes)})."
                )
            selectors[position] = selector
            new_axes[position] = None
        else:
            raise AxisError(
                f"axis {x.axes[position].name!r}: index {selector!r} must be an int, an "
                f"integer scalar array or a slice. {_NAMED_INDEXING_HELP}"
            )
    return NamedArray._wrap(x.array[tuple(selectors)], tuple(a for a in new_axes if a is not None))


def _is_integer_scalar(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | np.integer):
        return True
    return is_array(value) and np.ndim(value) == 0 and jnp.issubdtype(value.dtype, jnp.integer)


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
