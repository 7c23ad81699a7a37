"""Operations on NamedArrays by axis name: elementwise functions, reductions, `dot`,
`stack`, `concatenate`, `rename`, and creation from shapes.

Every function accepts plain scalars where an array may go and finds axes by name; a
missing axis is an `AxisError` that names it and lists the array's axes.
"""

from __future__ import annotations

import builtins
import itertools
import math
import operator
import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from bryo_pytree import is_shaped

from ._axis import (
    Axis,
    AxisError,
    AxisSelection,
    AxisSelector,
    Shape,
    axes_of,
    check_unique,
    format_axes,
    name_of,
    names_of,
    order_by_partial,
)
from ._named_array import (
    NamedArray,
    aligned,
    broadcast_axes,
    elementwise,
    refuse_foreign,
    refusing_foreign,
    union_axes,
)
from ._rearrange import reorder
from ._vmap import vmap

# -- creation ------------------------------------------------------------------------------


def zeros(shape: Shape, dtype: Any = None) -> NamedArray:
    """An array of zeros: `zeros({"Features": 16})`."""
    axes = axes_of(shape)
    return NamedArray._wrap(jnp.zeros(tuple(a.size for a in axes), dtype), axes)


def ones(shape: Shape, dtype: Any = None) -> NamedArray:
    """An array of ones: `ones({"Features": 16})`."""
    axes = axes_of(shape)
    return NamedArray._wrap(jnp.ones(tuple(a.size for a in axes), dtype), axes)


def full(shape: Shape, fill_value: Any, dtype: Any = None) -> NamedArray:
    """An array filled with `fill_value`: `full({"Features": 16}, float("inf"))`."""
    axes = axes_of(shape)
    return NamedArray._wrap(jnp.full(tuple(a.size for a in axes), fill_value, dtype), axes)


@refusing_foreign
def zeros_like(x: NamedArray, dtype: Any = None) -> NamedArray:
    return NamedArray._wrap(jnp.zeros_like(x.array, dtype), x.axes)


@refusing_foreign
def ones_like(x: NamedArray, dtype: Any = None) -> NamedArray:
    return NamedArray._wrap(jnp.ones_like(x.array, dtype), x.axes)


@refusing_foreign
def full_like(x: NamedArray, fill_value: Any, dtype: Any = None) -> NamedArray:
    return NamedArray._wrap(jnp.full_like(x.array, fill_value, dtype), x.axes)


def arange(
    axis: Shape, *, start: int | float = 0, step: int | float = 1, dtype: Any = None
) -> NamedArray:
    """`start, start + step, ...` along `axis`: `arange(Axis("Layers", 12))` is 0..11.

    Several axes (`arange((H, W))`, as in Haliax) count through their product in row-major
    order: `arange((Axis("H", 2), Axis("W", 3)))` is `[[0, 1, 2], [3, 4, 5]]`.
    """
    if isinstance(axis, str) or (
        isinstance(axis, Sequence) and builtins.any(isinstance(a, str) for a in axis)
    ):
        raise AxisError(f"`axis` must be an Axis (or several) with a size; got {axis!r}.")
    axes = axes_of(axis, "axis")
    count = math.prod(a.size for a in axes)
    counts = jnp.arange(count, dtype=dtype or jnp.result_type(start, step))
    values = (counts * step + start).astype(counts.dtype)
    return NamedArray._wrap(values.reshape(tuple(a.size for a in axes)), axes)


@refusing_foreign
def broadcast_to(
    x: Any, axes: AxisSelection, ensure_order: bool = True, enforce_no_extra_axes: bool = True
) -> NamedArray:
    """`x` (a NamedArray or a scalar) with the axes `axes`, new ones broadcast, as in Haliax.

    `axes` may name axes `x` has by name only; new axes need a size (`Axis`). Axes of `x`
    not in `axes` are an error unless `enforce_no_extra_axes=False` (then they follow).
    With `ensure_order`, the result's axes follow the order of `axes`; otherwise new axes
    go in front and `x`'s keep their places.

    Example:
        >>> Batch, Features = Axis("Batch", 2), Axis("Features", 3)
        >>> broadcast_to(ones(Features), (Batch, Features)).shape
        {'Batch': 2, 'Features': 3}
    """
    x = x if isinstance(x, NamedArray) else NamedArray(jnp.asarray(x), ())
    wanted = [_resolve_or_new(x, a) for a in _selection(axes)]
    check_unique(wanted, "axes")
    names = {a.name for a in wanted}
    extra = tuple(a for a in x.axes if a.name not in names)
    if enforce_no_extra_axes and extra:
        raise AxisError(
            f"`broadcast_to`: the array's axes {[a.name for a in extra]} are not in `axes` "
            f"{tuple(a.name for a in wanted)}; list them, or reduce them first, or pass "
            "`enforce_no_extra_axes=False` (hax.broadcast_axis) to keep them."
        )
    added = tuple(a for a in wanted if not x.has_axis(a.name))
    full = added + x.axes
    array = jnp.broadcast_to(aligned(x, full), tuple(a.size for a in full))
    result = NamedArray._wrap(array, full)
    if ensure_order and not _is_subsequence([a.name for a in wanted], [a.name for a in full]):
        order = tuple(wanted) + extra
        result = NamedArray._wrap(aligned(result, order), order)
    return result


@refusing_foreign
def broadcast_axis(x: NamedArray, axis: AxisSelection) -> NamedArray:
    """`x` with the axes `axis` added (broadcast) where missing, keeping its other axes.

    The explicit way to combine arrays whose axes do not include one another:
    `broadcast_axis(height_only, Width) + width_only`.
    """
    return broadcast_to(x, axis, ensure_order=True, enforce_no_extra_axes=False)


def _resolve_or_new(x: NamedArray, axis: AxisSelector) -> Axis:
    if x.has_axis(axis):
        return x.resolve_axis(axis)
    if isinstance(axis, Axis):
        return axis
    raise AxisError(
        f"`axes`: {axis!r} is a new axis for an array with axes {format_axes(x.axes)}; "
        f"give its size: Axis({axis!r}, size)."
    )


def _is_subsequence(needle: Sequence[str], haystack: Sequence[str]) -> bool:
    rest = iter(haystack)
    return builtins.all(name in rest for name in needle)


# -- elementwise ---------------------------------------------------------------------------


def _unary(fn: Callable[[Any], Any], name: str) -> Callable[[Any], Any]:
    def op(x: Any) -> Any:
        return elementwise(fn, x, what=name)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"`jnp.{name}` of each element, keeping the axes."
    return op


abs = _unary(jnp.abs, "abs")
sin = _unary(jnp.sin, "sin")
cos = _unary(jnp.cos, "cos")
tan = _unary(jnp.tan, "tan")
exp = _unary(jnp.exp, "exp")
log = _unary(jnp.log, "log")
log1p = _unary(jnp.log1p, "log1p")
sqrt = _unary(jnp.sqrt, "sqrt")
rsqrt = _unary(jax.lax.rsqrt, "rsqrt")
square = _unary(jnp.square, "square")
tanh = _unary(jnp.tanh, "tanh")
sign = _unary(jnp.sign, "sign")
floor = _unary(jnp.floor, "floor")
ceil = _unary(jnp.ceil, "ceil")
round = _unary(jnp.round, "round")
negative = _unary(jnp.negative, "negative")
isfinite = _unary(jnp.isfinite, "isfinite")
isnan = _unary(jnp.isnan, "isnan")
logical_not = _unary(jnp.logical_not, "logical_not")
absolute = _unary(jnp.absolute, "absolute")
angle = _unary(jnp.angle, "angle")
arccos = _unary(jnp.arccos, "arccos")
arccosh = _unary(jnp.arccosh, "arccosh")
arcsin = _unary(jnp.arcsin, "arcsin")
arcsinh = _unary(jnp.arcsinh, "arcsinh")
arctan = _unary(jnp.arctan, "arctan")
arctanh = _unary(jnp.arctanh, "arctanh")
around = _unary(jnp.around, "around")
cbrt = _unary(jnp.cbrt, "cbrt")
cosh = _unary(jnp.cosh, "cosh")
sinh = _unary(jnp.sinh, "sinh")
expm1 = _unary(jnp.expm1, "expm1")
log2 = _unary(jnp.log2, "log2")
log10 = _unary(jnp.log10, "log10")
reciprocal = _unary(jnp.reciprocal, "reciprocal")
trunc = _unary(jnp.trunc, "trunc")
isinf = _unary(jnp.isinf, "isinf")
relu = _unary(jax.nn.relu, "relu")
gelu = _unary(jax.nn.gelu, "gelu")
sigmoid = _unary(jax.nn.sigmoid, "sigmoid")
silu = _unary(jax.nn.silu, "silu")
softplus = _unary(jax.nn.softplus, "softplus")


def _binary(fn: Callable[[Any, Any], Any], name: str) -> Callable[[Any, Any], Any]:
    def op(x: Any, y: Any) -> Any:
        return elementwise(fn, x, y, what=name)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"`jnp.{name}` of the inputs lined up by axis name (scalars broadcast)."
    return op


add = _binary(jnp.add, "add")
subtract = _binary(jnp.subtract, "subtract")
multiply = _binary(jnp.multiply, "multiply")
divide = _binary(jnp.divide, "divide")
power = _binary(jnp.power, "power")
minimum = _binary(jnp.minimum, "minimum")
maximum = _binary(jnp.maximum, "maximum")
logical_and = _binary(jnp.logical_and, "logical_and")
logical_or = _binary(jnp.logical_or, "logical_or")
equal = _binary(jnp.equal, "equal")
not_equal = _binary(jnp.not_equal, "not_equal")
less = _binary(jnp.less, "less")
less_equal = _binary(jnp.less_equal, "less_equal")
greater = _binary(jnp.greater, "greater")
greater_equal = _binary(jnp.greater_equal, "greater_equal")


def isclose(
    x: Any, y: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
) -> Any:
    """`jnp.isclose` of the inputs lined up by axis name: where `|x - y| <= atol + rtol * |y|`."""
    return elementwise(jnp.isclose, x, y, what="isclose", rtol=rtol, atol=atol, equal_nan=equal_nan)


def where(
    condition: Any,
    x: Any = None,
    y: Any = None,
    *,
    fill_value: Any = None,
    new_axis: Axis | None = None,
) -> Any:
    """`x` where `condition` holds, else `y`, lined up by axis name.

    With `condition` alone, as in Haliax, the indices where it holds: one NamedArray per
    axis of `condition`, each along `new_axis` (its size is the number of places kept;
    `fill_value` pads the rest), like `jnp.where(condition, size=..., fill_value=...)`.
    """
    if x is None and y is None:
        if not isinstance(condition, NamedArray) or new_axis is None or fill_value is None:
            raise AxisError(
                "`where` with only a condition needs a NamedArray condition, `new_axis` (an "
                "Axis sized for the result) and `fill_value`, e.g. "
                "where(mask, new_axis=Axis('Hits', 10), fill_value=-1)."
            )
        return nonzero(condition, size=new_axis, fill_value=fill_value)
    if x is None or y is None:
        raise AxisError("`where` takes both `x` and `y`, or neither (the one-argument form).")
    return elementwise(jnp.where, condition, x, y, what="where")


@refusing_foreign
def nonzero(x: NamedArray, *, size: Axis, fill_value: Any = 0) -> tuple[NamedArray, ...]:
    """The indices of `x`'s nonzero elements, one NamedArray along `size` per axis of `x`
    (`jnp.nonzero(..., size=size.size, fill_value=fill_value)`)."""
    if not isinstance(x, NamedArray) or not isinstance(size, Axis):
        raise AxisError(f"`nonzero` takes a NamedArray and `size=` an Axis; got {x!r}, {size!r}.")
    found = jnp.nonzero(x.array, size=size.size, fill_value=fill_value)
    return tuple(NamedArray._wrap(indices, (size,)) for indices in found)


@refusing_foreign
def bincount(x: NamedArray, Counts: Axis, *, weights: Any = None, minlength: int = 0) -> NamedArray:
    """How often each value `0..Counts.size - 1` occurs in the one-axis integer `x`
    (summing `weights`, broadcast to `x` by name, if given)."""
    if x.ndim != 1:
        raise AxisError(f"`bincount` needs `x` with one axis; got {format_axes(x.axes)}.")
    raw = broadcast_to(weights, x.axes).array if isinstance(weights, NamedArray) else weights
    counts = jnp.bincount(x.array, weights=raw, minlength=minlength, length=Counts.size)
    return NamedArray._wrap(counts, (Counts,))


@refusing_foreign
def unique(
    x: NamedArray,
    Unique: Axis,
    *,
    return_index: bool = False,
    return_inverse: bool = False,
    return_counts: bool = False,
    axis: AxisSelector | None = None,
    fill_value: Any = None,
) -> Any:
    """`jnp.unique` with named axes: the distinct values (or, with `axis`, the distinct
    slices along it) along the new axis `Unique`, whose size bounds how many are kept.

    With `return_index`/`return_inverse`/`return_counts`, a tuple in that order: indices
    and counts along `Unique`; the inverse over `x`'s axes (over `axis` when given).
    """
    position = None if axis is None else x.position_of(axis, "axis")
    found = jnp.unique(
        x.array,
        return_index=return_index,
        return_inverse=return_inverse,
        return_counts=return_counts,
        axis=position,
        size=Unique.size,
        fill_value=fill_value,
    )
    parts = list(found) if return_index or return_inverse or return_counts else [found]
    values_axes = (Unique,) if position is None else _replaced(x.axes, position, (Unique,))
    result = [NamedArray._wrap(parts.pop(0), values_axes)]
    if return_index:
        result.append(NamedArray._wrap(parts.pop(0), (Unique,)))
    if return_inverse:
        over = x.axes if position is None else (x.axes[position],)
        inverse = parts.pop(0).reshape(tuple(a.size for a in over))
        result.append(NamedArray._wrap(inverse, over))
    if return_counts:
        result.append(NamedArray._wrap(parts.pop(0), (Unique,)))
    return result[0] if len(result) == 1 else tuple(result)


@refusing_foreign
def unique_values(
    x: NamedArray, Unique: Axis, axis: AxisSelector | None = None, fill_value: Any = None
) -> NamedArray:
    """`unique`'s values alone."""
    return unique(x, Unique, axis=axis, fill_value=fill_value)


@refusing_foreign
def unique_counts(
    x: NamedArray, Unique: Axis, axis: AxisSelector | None = None, fill_value: Any = None
) -> tuple[NamedArray, NamedArray]:
    """`unique`'s values and counts."""
    return unique(x, Unique, return_counts=True, axis=axis, fill_value=fill_value)


@refusing_foreign
def unique_inverse(
    x: NamedArray, Unique: Axis, axis: AxisSelector | None = None, fill_value: Any = None
) -> tuple[NamedArray, NamedArray]:
    """`unique`'s values and inverse."""
    return unique(x, Unique, return_inverse=True, axis=axis, fill_value=fill_value)


@refusing_foreign
def unique_all(
    x: NamedArray, Unique: Axis, axis: AxisSelector | None = None, fill_value: Any = None
) -> tuple[NamedArray, NamedArray, NamedArray, NamedArray]:
    """`unique`'s values, indices, inverse and counts."""
    return unique(
        x,
        Unique,
        return_index=True,
        return_inverse=True,
        return_counts=True,
        axis=axis,
        fill_value=fill_value,
    )


def clip(x: Any, lower: Any, upper: Any) -> Any:
    """`x` clipped into `[lower, upper]` (each may be a NamedArray or a scalar)."""
    return elementwise(lambda a, lo, hi: jnp.clip(a, lo, hi), x, lower, upper, what="clip")


# -- reductions ----------------------------------------------------------------------------


def _reduction(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    def reduce(
        x: Any, axis: AxisSelection | None = None, *, where: Any = None, **kwargs: Any
    ) -> Any:
        if where is not None:
            kwargs["where"] = _mask_for(x, where, name)
        if not isinstance(x, NamedArray):
            if axis is not None:
                raise AxisError(
                    f"`{name}` by axis name needs a NamedArray; got {type(x).__name__}."
                )
            return fn(x, **kwargs)
        if axis is None:
            return NamedArray._wrap(fn(x.array, **kwargs), ())
        positions = tuple(x.position_of(a, "axis") for a in _selection(axis))
        kept = tuple(a for i, a in enumerate(x.axes) if i not in positions)
        return NamedArray._wrap(fn(x.array, axis=positions, **kwargs), kept)

    reduce.__name__ = reduce.__qualname__ = name
    reduce.__doc__ = (
        f"`jnp.{name}` over the named `axis` (one or several; None: all), "
        "e.g. `{name}(x, 'Features')`. `where=` (a NamedArray mask) is broadcast by name."
    ).replace("{name}", name)
    return refusing_foreign(reduce)


def _mask_for(x: Any, where: Any, what: str) -> Any:
    """`where=` of a reduction: a NamedArray mask is broadcast to `x`'s axes by name."""
    if not isinstance(where, NamedArray):
        return where
    if not isinstance(x, NamedArray):
        raise AxisError(f"`{what}`: a named `where` needs a NamedArray to reduce.")
    return broadcast_to(where, x.axes).array


def _selection(axis: AxisSelection | Mapping[str, int]) -> tuple[AxisSelector, ...]:
    if isinstance(axis, Axis | str):
        return (axis,)
    if isinstance(axis, Mapping):
        return axes_of(axis, "axis")
    names_of(axis)  # validates
    return tuple(axis)


sum = _reduction(jnp.sum, "sum")
mean = _reduction(jnp.mean, "mean")
max = _reduction(jnp.max, "max")
min = _reduction(jnp.min, "min")
prod = _reduction(jnp.prod, "prod")
var = _reduction(jnp.var, "var")
std = _reduction(jnp.std, "std")
all = _reduction(jnp.all, "all")
any = _reduction(jnp.any, "any")
logsumexp = _reduction(jax.nn.logsumexp, "logsumexp")


def _along(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    def scan_along(x: NamedArray, axis: AxisSelector, *, dtype: Any = None) -> NamedArray:
        return NamedArray._wrap(fn(x.array, axis=x.position_of(axis, "axis"), dtype=dtype), x.axes)

    scan_along.__name__ = scan_along.__qualname__ = name
    scan_along.__doc__ = f"`jnp.{name}` along the named `axis`, keeping the axes."
    return refusing_foreign(scan_along)


cumsum = _along(jnp.cumsum, "cumsum")
cumprod = _along(jnp.cumprod, "cumprod")


@refusing_foreign
def argsort(x: NamedArray, axis: AxisSelector | None, *, stable: bool = False) -> Any:
    """The indices that sort `x` along the named `axis`, keeping the axes.

    `axis=None` sorts the flattened array and returns a plain array, as in Haliax.
    """
    if axis is None:
        return jnp.argsort(x.array, axis=None, stable=stable)
    position = x.position_of(axis, "axis")
    return NamedArray._wrap(jnp.argsort(x.array, axis=position, stable=stable), x.axes)


def _arg_extreme(fn: Callable[..., Any], name: str) -> Callable[..., NamedArray]:
    def arg_extreme(x: NamedArray, axis: AxisSelector | None = None) -> NamedArray:
        if axis is None:  # the flat index, as jnp and Haliax give it
            return NamedArray._wrap(fn(x.array), ())
        position = x.position_of(axis, "axis")
        kept = x.axes[:position] + x.axes[position + 1 :]
        return NamedArray._wrap(fn(x.array, axis=position), kept)

    arg_extreme.__name__ = arg_extreme.__qualname__ = name
    arg_extreme.__doc__ = (
        f"`jnp.{name}` along one named `axis` (None: the index into the flattened array)."
    )
    return refusing_foreign(arg_extreme)


argmax = _arg_extreme(jnp.argmax, "argmax")
argmin = _arg_extreme(jnp.argmin, "argmin")


@refusing_foreign
def softmax(x: NamedArray, axis: AxisSelection) -> NamedArray:
    """`jax.nn.softmax` over the named `axis`."""
    positions = tuple(x.position_of(a, "axis") for a in _selection(axis))
    return NamedArray._wrap(jax.nn.softmax(x.array, axis=positions), x.axes)


@refusing_foreign
def log_softmax(x: NamedArray, axis: AxisSelection) -> NamedArray:
    """`jax.nn.log_softmax` over the named `axis`."""
    positions = tuple(x.position_of(a, "axis") for a in _selection(axis))
    return NamedArray._wrap(jax.nn.log_softmax(x.array, axis=positions), x.axes)


# -- contraction -----------------------------------------------------------------------------


def dot(
    *arrays: Any,
    axis: AxisSelection | None = None,
    precision: Any = None,
    out_axes: Sequence[Any] | None = None,
) -> NamedArray:
    """Multiply the arrays and sum over `axis` (one name or several; None: every axis;
    `()`: none, an outer product).

    The other axes are kept, in order of first appearance, or in the order `out_axes`
    gives: every kept axis, or some of them with `...` (any number) for the rest, as in
    Haliax (`out_axes=("Out", ...)`). Also callable Haliax's older way, `dot(axis, *arrays)`.

    Example:
        >>> w = ones({"In": 3, "Out": 2}); x = ones({"Batch": 4, "In": 3})
        >>> dot(x, w, axis="In").shape
        {'Batch': 4, 'Out': 2}
    """
    if arrays and not isinstance(arrays[0], NamedArray) and axis is None:
        axis, arrays = arrays[0], arrays[1:]
    refuse_foreign(arrays, "dot")
    bad = [a for a in arrays if not isinstance(a, NamedArray)]
    if not arrays or bad:
        raise AxisError(f"`dot` multiplies NamedArrays; got {bad[0] if bad else 'none'!r}.")
    union = broadcast_axes(*arrays, what="dot")
    contracted = set(names_of(axis, "axis")) if axis is not None else {a.name for a in union}
    for name in contracted:
        if not builtins.any(a.has_axis(name) for a in arrays):
            shapes = "; ".join(format_axes(a.axes) for a in arrays)
            raise AxisError(f"`dot`: axis {name!r} is in none of the arrays (axes: {shapes}).")
    letters = {a.name: string.ascii_letters[i] for i, a in enumerate(union)}
    kept = tuple(a for a in union if a.name not in contracted)
    if out_axes is not None:
        kept = order_by_partial(_out_order(out_axes), kept, "out_axes")
    spec = ",".join("".join(letters[a.name] for a in x.axes) for x in arrays)
    spec += "->" + "".join(letters[a.name] for a in kept)
    return NamedArray._wrap(jnp.einsum(spec, *(x.array for x in arrays), precision=precision), kept)


def _out_order(out_axes: object) -> Sequence[object]:
    if isinstance(out_axes, Axis | str):
        return (out_axes,)
    if isinstance(out_axes, Sequence):
        return out_axes
    raise AxisError(
        f"`out_axes` must be a sequence of axes and `...`, e.g. ('Out', ...); got {out_axes!r}."
    )


# -- structure -----------------------------------------------------------------------------


@refusing_foreign
def stack(axis: AxisSelector, arrays: Sequence[NamedArray]) -> NamedArray:
    """Stack arrays with the same axes along a new leading `axis` (a name or an Axis)."""
    if not arrays:
        raise AxisError("`stack` needs at least one array.")
    new = axis if isinstance(axis, Axis) else Axis(name_of(axis), len(arrays))
    if new.size != len(arrays):
        raise AxisError(
            f"`stack`: axis {new.name!r} has size {new.size} but {len(arrays)} arrays were given."
        )
    first = arrays[0]
    for other in arrays[1:]:
        if set(other.axis_names) != set(first.axis_names):
            raise AxisError(
                f"`stack` needs arrays with the same axes; got {format_axes(first.axes)} and "
                f"{format_axes(other.axes)}."
            )
    broadcast_axes(*arrays, what="stack")
    axes = check_unique((new, *first.axes), "stack")
    return NamedArray._wrap(jnp.stack([_aligned_same(x, first.axes) for x in arrays]), axes)


@refusing_foreign
def concatenate(axis: AxisSelector, arrays: Sequence[NamedArray]) -> NamedArray:
    """Join arrays along an existing named `axis`; the other axes must agree."""
    if not arrays:
        raise AxisError("`concatenate` needs at least one array.")
    name = name_of(axis)
    first = arrays[0]
    position = first.position_of(name, "axis")
    parts = []
    for x in arrays:
        x.position_of(name, "axis")
        others = [a for a in x.axes if a.name != name]
        expected = [a for a in first.axes if a.name != name]
        if set(others) != set(expected):
            raise AxisError(
                f"`concatenate` along {name!r} needs the same other axes; got "
                f"{format_axes(first.axes)} and {format_axes(x.axes)}."
            )
        order = [x.position_of(a.name) for a in first.axes]
        parts.append(jnp.transpose(x.array, order))
    total = builtins.sum(x.axis_size(name) for x in arrays)
    axes = tuple(a.resize(total) if a.name == name else a for a in first.axes)
    return NamedArray._wrap(jnp.concatenate(parts, axis=position), axes)


@refusing_foreign
def roll(x: NamedArray, shift: Any, axis: AxisSelection) -> NamedArray:
    """`jnp.roll` along the named `axis` (or several, with one `shift` each).

    `shift` is an int, a tuple of ints, an integer 0-d array or a NamedArray without axes.

    Example:
        >>> roll(arange(Axis("H", 4)), 1, "H").array.tolist()
        [3, 0, 1, 2]
    """
    if isinstance(shift, NamedArray):
        if shift.axes:
            raise TypeError(
                f"`shift` of `roll` must be a scalar; got a NamedArray with axes "
                f"{format_axes(shift.axes)}. Roll each slice with hax.vmap, or reduce it first."
            )
        shift = shift.array
    positions = tuple(x.position_of(a, "axis") for a in _selection(axis))
    if isinstance(axis, Axis | str):
        return NamedArray._wrap(jnp.roll(x.array, shift, positions[0]), x.axes)
    return NamedArray._wrap(jnp.roll(x.array, shift, positions), x.axes)


@refusing_foreign
def pad(
    x: NamedArray,
    pad_width: Mapping[AxisSelector, tuple[int, int]],
    *,
    mode: str = "constant",
    constant_values: Any = 0,
    **kwargs: Any,
) -> NamedArray:
    """`jnp.pad` by axis: `pad(x, {"Height": (1, 2)})` adds one row before, two after.

    Axes left out of `pad_width` are not padded. Unlike Haliax, a key naming an axis the
    array lacks is an error (Haliax skips it, which hides a misspelt name).
    """
    widths = {x.position_of(axis, "pad_width"): _pad_pair(axis, w) for axis, w in pad_width.items()}
    padding = [widths.get(i, (0, 0)) for i in range(x.ndim)]
    if isinstance(constant_values, NamedArray):
        constant_values = constant_values.scalar()
    if mode == "constant":
        kwargs["constant_values"] = constant_values
    array = jnp.pad(x.array, padding, mode=mode, **kwargs)
    axes = tuple(
        a.resize(a.size + before + after)
        for a, (before, after) in zip(x.axes, padding, strict=True)
    )
    return NamedArray._wrap(array, axes)


def _pad_pair(axis: AxisSelector, width: Any) -> tuple[int, int]:
    try:
        before, after = width
        return operator.index(before), operator.index(after)
    except (TypeError, ValueError):
        raise AxisError(
            f"`pad_width` of axis {name_of(axis)!r} must be a pair (before, after) of ints; "
            f"got {width!r}."
        ) from None


def _two_axes(
    x: NamedArray, axis1: AxisSelector, axis2: AxisSelector, what: str
) -> tuple[int, int]:
    first, second = x.position_of(axis1, "axis1"), x.position_of(axis2, "axis2")
    if first == second:
        raise AxisError(f"`{what}` needs two different axes; got {name_of(axis1)!r} twice.")
    return first, second


@refusing_foreign
def trace(
    x: NamedArray, axis1: AxisSelector, axis2: AxisSelector, offset: int = 0, dtype: Any = None
) -> NamedArray:
    """The sum of the diagonal over the named axes `axis1`, `axis2`; both are removed."""
    first, second = _two_axes(x, axis1, axis2, "trace")
    array = jnp.trace(x.array, offset=offset, axis1=first, axis2=second, dtype=dtype)
    kept = tuple(a for i, a in enumerate(x.axes) if i not in (first, second))
    return NamedArray._wrap(array, kept)


def _triangle(fn: Callable[..., Any], name: str) -> Callable[..., NamedArray]:
    def triangle(x: NamedArray, axis1: AxisSelector, axis2: AxisSelector, k: int = 0) -> NamedArray:
        _two_axes(x, axis1, axis2, name)
        moved = reorder(x, (..., axis1, axis2))
        return NamedArray._wrap(fn(moved.array, k=k), moved.axes)

    triangle.__name__ = triangle.__qualname__ = name
    triangle.__doc__ = (
        f"`jnp.{name}` over the named axes `axis1` (rows) and `axis2` (columns); as in "
        "Haliax, the result has those two axes last."
    )
    return refusing_foreign(triangle)


tril = _triangle(jnp.tril, "tril")
triu = _triangle(jnp.triu, "triu")


@refusing_foreign
def allclose(
    x: Any, y: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
) -> bool:
    """Whether every element of `x` and `y`, lined up by name, is close (`isclose`)."""
    return bool(isclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan).array.all())


@refusing_foreign
def array_equal(x: NamedArray, y: NamedArray) -> bool:
    """Whether `x` and `y` have the same axes (in any order) and the same elements."""
    if set(x.axes) != set(y.axes):
        return False
    return bool(jnp.array_equal(x.array, aligned(y, x.axes)))


@refusing_foreign
def array_equiv(x: NamedArray, y: NamedArray) -> bool:
    """Whether `x` and `y` are equal once broadcast by name (False when they cannot be)."""
    try:
        return bool(equal(x, y).array.all())
    except AxisError:
        return False


@refusing_foreign
def flatten_axes(x: NamedArray, old_axes: AxisSelection, new_axis: AxisSelector) -> NamedArray:
    """Merge `old_axes` (in that order, row-major) into one axis `new_axis`, placed where
    the first of them was: `flatten_axes(x, ("H", "W"), "Pixels")`.

    `unflatten_axis` undoes it. With no `old_axes`, `new_axis` (size 1) goes in front.
    """
    merged = tuple(x.resolve_axis(a) for a in _selection(old_axes))
    check_unique(merged, "old_axes")
    total = math.prod(a.size for a in merged)
    new = _sized(new_axis, total, "new_axis")
    names = {a.name for a in merged}
    if not merged:
        return NamedArray._wrap(x.array[None], check_unique((new, *x.axes), "new_axis"))
    order: list[Axis] = []
    result: list[Axis] = []
    for axis in x.axes:
        if axis.name not in names:
            order.append(axis)
            result.append(axis)
        elif new not in result:
            order.extend(merged)
            result.append(new)
    axes = check_unique(result, "new_axis")
    array = aligned(x, order).reshape(tuple(a.size for a in axes))
    return NamedArray._wrap(array, axes)


@refusing_foreign
def unflatten_axis(x: NamedArray, axis: AxisSelector, new_axes: Shape) -> NamedArray:
    """Split the named `axis` into `new_axes` (row-major; their sizes multiply to its size),
    in its place. No `new_axes` removes an axis of size 1."""
    position = x.position_of(axis, "axis")
    old = x.axes[position]
    parts = () if isinstance(new_axes, Sequence) and not new_axes else axes_of(new_axes, "new_axes")
    if math.prod(a.size for a in parts) != old.size:
        sizes = format_axes(parts)
        raise AxisError(
            f"`unflatten_axis`: axis {old.name!r} of size {old.size} cannot split into {sizes}; "
            "their sizes must multiply to its size."
        )
    axes = _replaced(x.axes, position, parts)
    return NamedArray._wrap(x.array.reshape(tuple(a.size for a in axes)), axes)


@refusing_foreign
def ravel(x: NamedArray, new_axis: AxisSelector) -> NamedArray:
    """Every axis merged into one, `new_axis`, in row-major order (`jnp.ravel`)."""
    return flatten_axes(x, x.axes, new_axis)


@refusing_foreign
def flatten(x: NamedArray, new_axis: AxisSelector) -> NamedArray:
    """`ravel`, by Haliax's other name."""
    return ravel(x, new_axis)


def _sized(axis: AxisSelector, size: int, what: str) -> Axis:
    if isinstance(axis, Axis) and axis.size != size:
        raise AxisError(
            f"`{what}`: {axis!r} must have size {size}, the product of the merged axes."
        )
    return axis if isinstance(axis, Axis) else Axis(name_of(axis, what), size)


@refusing_foreign
def split(x: NamedArray, axis: AxisSelector, new_axes: Sequence[Axis]) -> list[NamedArray]:
    """Cut `x` along `axis` into consecutive pieces, one per `Axis` in `new_axes`, which
    takes that axis's place in its piece; their sizes must add up to the axis's size."""
    position = x.position_of(axis, "axis")
    old = x.axes[position]
    pieces = tuple(new_axes)
    for piece in pieces:
        if not isinstance(piece, Axis):
            raise AxisError(
                f"`new_axes` of `split` must be Axis objects (with sizes); got {piece!r}."
            )
    total = builtins.sum(a.size for a in pieces)
    if total != old.size:
        raise AxisError(
            f"`split`: the sizes of {format_axes(pieces)} add up to {total}, not to the size "
            f"{old.size} of axis {old.name!r}."
        )
    offsets = list(itertools.accumulate(a.size for a in pieces))[:-1]
    arrays = jnp.split(x.array, offsets, axis=position)
    return [
        NamedArray._wrap(array, _replaced(x.axes, position, (piece,)))
        for array, piece in zip(arrays, pieces, strict=True)
    ]


@refusing_foreign
def repeat(
    x: NamedArray, repeats: Any, axis: AxisSelector, total_repeat_length: int | None = None
) -> NamedArray:
    """`jnp.repeat` along the named `axis`: each element `repeats` times (an int, or one
    count per element); the axis keeps its name and grows."""
    position = x.position_of(axis, "axis")
    array = jnp.repeat(x.array, repeats, axis=position, total_repeat_length=total_repeat_length)
    grown = x.axes[position].resize(array.shape[position])
    return NamedArray._wrap(array, _replaced(x.axes, position, (grown,)))


def _replaced(axes: tuple[Axis, ...], position: int, new: tuple[Axis, ...]) -> tuple[Axis, ...]:
    """`axes` with the one at `position` replaced by `new` (names checked unique)."""
    return check_unique((*axes[:position], *new, *axes[position + 1 :]), "new_axes")


@refusing_foreign
def tile(x: NamedArray, reps: Mapping[AxisSelector, int]) -> NamedArray:
    """`jnp.tile` by axis: `{"W": 2}` repeats the whole array twice along "W"; a name `x`
    lacks becomes a new axis in front, of size `reps`, as in Haliax."""
    counts = [1] * x.ndim
    new: list[Axis] = []
    for axis, count in reps.items():
        position = x.axis_position(axis)
        if position is None:
            new.append(Axis(name_of(axis, "reps"), count))
        else:
            counts[position] = operator.index(count)
    array = jnp.tile(x.array, [a.size for a in new] + counts)
    axes = tuple(new) + tuple(a.resize(a.size * n) for a, n in zip(x.axes, counts, strict=True))
    return NamedArray._wrap(array, check_unique(axes, "reps"))


@refusing_foreign
def searchsorted(
    a: NamedArray, v: Any, *, side: str = "left", sorter: Any = None, method: str = "scan"
) -> NamedArray:
    """`jnp.searchsorted` of `v` into the one-axis sorted `a`: the result has `v`'s axes."""
    if a.ndim != 1:
        raise AxisError(
            f"`searchsorted` needs `a` with one axis; got {format_axes(a.axes)}. Select a slice."
        )
    values = v if isinstance(v, NamedArray) else NamedArray(jnp.asarray(v), ())
    order = sorter.array if isinstance(sorter, NamedArray) else sorter
    found = jnp.searchsorted(a.array, values.array, side=side, sorter=order, method=method)
    return NamedArray._wrap(found, values.axes)


def _aligned_same(x: NamedArray, axes: tuple[Axis, ...]) -> jax.Array:
    order = [x.position_of(a.name) for a in axes]
    return x.array if order == list(range(x.ndim)) else jnp.transpose(x.array, order)


@refusing_foreign
def take(x: NamedArray, axis: AxisSelector, index: Any) -> NamedArray:
    """Select along the named `axis` by an integer, or by a NamedArray of integer indices.

    An integer drops the axis (`take(x, "Width", 2)` is `x["Width", 2]`). A NamedArray
    index puts its own axes where `axis` was; axes it shares with `x` are matched by name,
    one index per position (like `jnp.take_along_axis`).

    Example:
        >>> x = arange(Axis("Width", 3))
        >>> take(x, "Width", NamedArray(jnp.array([2, 0]), {"Pick": 2})).array.tolist()
        [2, 0]
    """
    if not isinstance(index, NamedArray):
        return x[name_of(axis, "axis"), index]
    if not jnp.issubdtype(index.dtype, jnp.integer):
        raise AxisError(f"`index` of `take` must hold integers; got dtype {index.dtype}.")
    position = x.position_of(axis, "axis")
    rest = x.axes[:position] + x.axes[position + 1 :]
    if not {a.name for a in rest} & set(index.axis_names):
        spliced = rest[:position] + index.axes + rest[position:]
        taken = jnp.take(x.array, index.array, axis=position)
        return NamedArray._wrap(taken, check_unique(spliced, "take"))
    # Shared axes: gather one element per position. The taken axis gets a private name so
    # that an index axis of the same name stays apart from it.
    hidden = Axis(f"__take__{x.axes[position].name}", x.axes[position].size)
    source = NamedArray._wrap(x.array, (*rest[:position], hidden, *rest[position:]))
    axes = union_axes([rest, index.axes], what="take")
    sizes = tuple(a.size for a in axes)
    values = jnp.broadcast_to(aligned(source, (*axes, hidden)), (*sizes, hidden.size))
    picks = jnp.broadcast_to(aligned(index, axes), sizes)
    return NamedArray._wrap(jnp.take_along_axis(values, picks[..., None], axis=-1)[..., 0], axes)


def updated_slice(
    x: NamedArray, start: Mapping[AxisSelector, Any], update: NamedArray
) -> NamedArray:
    """`x` with `update` written into it from the index `start` of each named axis.

    `start` maps axes to where the block begins (0 for the axes left out): ints, integer
    0-d arrays, or integer NamedArrays whose axes are axes of `x`, which write one block
    per position along them (Haliax's ragged updates: `{"Seq": lengths}` with `lengths`
    over "Batch"). Each axis of `update` must be an axis of `x` (possibly shorter); an axis
    of `x` that `update` lacks is covered whole, `update` broadcast along it. An `update`
    without axes writes the one element at `start` (as in Haliax).

    Example:
        >>> seq = arange(Axis("Seq", 5))
        >>> update = NamedArray(jnp.array([7, 8]), {"Seq": 2})
        >>> updated_slice(seq, {"Seq": 2}, update).array.tolist()
        [0, 1, 7, 8, 4]
    """
    refuse_foreign((x, update, *start.values()), "updated_slice")
    mapped = [a.name for v in start.values() if isinstance(v, NamedArray) for a in v.axes]
    if mapped:
        write = _updated_block
        for name in dict.fromkeys(mapped):
            x.position_of(name, "start")  # a start's axis must be one of the array's
            write = vmap(write, name)
        return reorder(write(x, start, update), x.axes)
    return _updated_block(x, start, update)


def _updated_block(x: NamedArray, start: Mapping[AxisSelector, Any], update: Any) -> NamedArray:
    if not isinstance(update, NamedArray):
        update = NamedArray(jnp.asarray(update), ())
    stray = [a.name for a in update.axes if not x.has_axis(a.name)]
    if stray:
        raise AxisError(
            f"`update` has axes {stray} that are not in the original array with shape "
            f"{format_axes(x.axes)}; rename them to the array's axes they are written into."
        )
    corner: list[Any] = [0] * x.ndim
    for axis, value in start.items():
        corner[x.position_of(axis, "start")] = (
            value.scalar() if isinstance(value, NamedArray) else value
        )
    if update.axes:
        block = tuple(update.resolve_axis(a.name) if update.has_axis(a.name) else a for a in x.axes)
    else:  # a scalar writes one element, as in Haliax
        block = tuple(a.resize(1) for a in x.axes)
    for axis, piece, begin in zip(x.axes, block, corner, strict=True):
        end = begin + piece.size if isinstance(begin, int) else piece.size
        if end > axis.size:
            raise AxisError(
                f"`update` of size {piece.size} along {axis.name!r} does not fit from index "
                f"{begin if isinstance(begin, int) else 0} in the array's {axis.size}."
            )
    shaped = tuple(a if update.has_axis(a.name) else a.resize(1) for a in block)
    values = jnp.broadcast_to(aligned(update, shaped), tuple(a.size for a in block))
    return NamedArray._wrap(jax.lax.dynamic_update_slice(x.array, values, corner), x.axes)


@refusing_foreign
def rename(x: NamedArray, renames: Mapping[AxisSelector, AxisSelector]) -> NamedArray:
    """Rename axes: `rename(x, {"Pos": "KeyPos"})` (sizes are kept)."""
    new_names = {}
    for old, new in renames.items():
        position = x.position_of(old, "renames")
        size = x.axes[position].size
        if isinstance(new, Axis) and new.size != size:
            raise AxisError(
                f"`renames`: {new!r} does not match the size {size} of axis {name_of(old)!r}."
            )
        new_names[position] = name_of(new, "renames")
    axes = tuple(Axis(new_names.get(i, a.name), a.size) for i, a in enumerate(x.axes))
    return NamedArray._wrap(x.array, check_unique(axes, "rename"))


def is_named_array(x: object) -> bool:
    """Whether `x` is a NamedArray (the `is_leaf` to keep NamedArrays whole)."""
    return isinstance(x, NamedArray)


def is_jax_or_hax_array_like(x: object) -> bool:
    """Whether `x` is a NamedArray or array-like (has a shape and a dtype), as in Haliax.

    Used as `is_scanned=` it scans every array, 0-d ones included (an error for those).
    """
    return isinstance(x, NamedArray) or is_shaped(x)
