"""Operations on NamedArrays by axis name: elementwise functions, reductions, `dot`,
`stack`, `concatenate`, `rename`, and creation from shapes.

Every function accepts plain scalars where an array may go and finds axes by name; a
missing axis is an `AxisError` that names it and lists the array's axes.
"""

from __future__ import annotations

import builtins
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
)
from ._named_array import (
    NamedArray,
    aligned,
    broadcast_axes,
    elementwise,
    refuse_foreign,
    union_axes,
)

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


def zeros_like(x: NamedArray, dtype: Any = None) -> NamedArray:
    return NamedArray._wrap(jnp.zeros_like(x.array, dtype), x.axes)


def ones_like(x: NamedArray, dtype: Any = None) -> NamedArray:
    return NamedArray._wrap(jnp.ones_like(x.array, dtype), x.axes)


def full_like(x: NamedArray, fill_value: Any, dtype: Any = None) -> NamedArray:
    return NamedArray._wrap(jnp.full_like(x.array, fill_value, dtype), x.axes)


def arange(
    axis: Axis, *, start: int | float = 0, step: int | float = 1, dtype: Any = None
) -> NamedArray:
    """`start, start + step, ...` along `axis`: `arange(Axis("Layers", 12))` is 0..11."""
    if not isinstance(axis, Axis):
        raise AxisError(f"`axis` must be an Axis with a size; got {axis!r}.")
    values = start + step * jnp.arange(axis.size, dtype=dtype)
    return NamedArray._wrap(values if dtype is None else values.astype(dtype), (axis,))


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


def where(condition: Any, x: Any, y: Any) -> Any:
    """`x` where `condition` holds, else `y`, lined up by axis name."""
    return elementwise(jnp.where, condition, x, y, what="where")


def clip(x: Any, lower: Any, upper: Any) -> Any:
    """`x` clipped into `[lower, upper]` (each may be a NamedArray or a scalar)."""
    return elementwise(lambda a, lo, hi: jnp.clip(a, lo, hi), x, lower, upper, what="clip")


# -- reductions ----------------------------------------------------------------------------


def _reduction(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    def reduce(x: Any, axis: AxisSelection | None = None, **kwargs: Any) -> Any:
        refuse_foreign((x,), name)
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
        "e.g. `{name}(x, 'Features')`."
    ).replace("{name}", name)
    return reduce


def _selection(axis: AxisSelection) -> tuple[AxisSelector, ...]:
    if isinstance(axis, Axis | str):
        return (axis,)
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


def argmax(x: NamedArray, axis: AxisSelector) -> NamedArray:
    """The index of the largest element along one named `axis`."""
    position = x.position_of(axis, "axis")
    return NamedArray._wrap(
        jnp.argmax(x.array, axis=position), x.axes[:position] + x.axes[position + 1 :]
    )


def argmin(x: NamedArray, axis: AxisSelector) -> NamedArray:
    """The index of the smallest element along one named `axis`."""
    position = x.position_of(axis, "axis")
    return NamedArray._wrap(
        jnp.argmin(x.array, axis=position), x.axes[:position] + x.axes[position + 1 :]
    )


def softmax(x: NamedArray, axis: AxisSelection) -> NamedArray:
    """`jax.nn.softmax` over the named `axis`."""
    positions = tuple(x.position_of(a, "axis") for a in _selection(axis))
    return NamedArray._wrap(jax.nn.softmax(x.array, axis=positions), x.axes)


def log_softmax(x: NamedArray, axis: AxisSelection) -> NamedArray:
    """`jax.nn.log_softmax` over the named `axis`."""
    positions = tuple(x.position_of(a, "axis") for a in _selection(axis))
    return NamedArray._wrap(jax.nn.log_softmax(x.array, axis=positions), x.axes)


# -- contraction -----------------------------------------------------------------------------


def dot(*arrays: Any, axis: AxisSelection | None = None, precision: Any = None) -> NamedArray:
    """Multiply the arrays and sum over `axis` (one name or several; None: every axis).

    The other axes are kept, in order of first appearance. Also callable Haliax's older
    way, `dot(axis, *arrays)`.

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
    spec = ",".join("".join(letters[a.name] for a in x.axes) for x in arrays)
    spec += "->" + "".join(letters[a.name] for a in kept)
    return NamedArray._wrap(jnp.einsum(spec, *(x.array for x in arrays), precision=precision), kept)


# -- structure -----------------------------------------------------------------------------


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


def _aligned_same(x: NamedArray, axes: tuple[Axis, ...]) -> jax.Array:
    order = [x.position_of(a.name) for a in axes]
    return x.array if order == list(range(x.ndim)) else jnp.transpose(x.array, order)


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
