"""`Conv` and `ConvTranspose`: N-dimensional convolutions over `(*batch, *spatial, features)`.

The kernel has shape `(*kernel_size, in_features // feature_group_count, out_features)`
and is initialised from the `params` stream. Besides the paddings `jax.lax` knows
('SAME', 'VALID', 'SAME_LOWER', explicit `(low, high)` pairs) both layers take
'CIRCULAR' (periodic boundaries); `Conv` also takes 'REFLECT' and, in one spatial
dimension, 'CAUSAL' (left padding only: output `t` sees inputs up to `t`). A `mask` of the
kernel's shape multiplies the kernel before each call (masked convolutions).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from jax import lax

from . import dtypes, initializers
from ._common import (
    NO_METADATA,
    Metadata,
    OutSharding,
    RngsArg,
    add_bias,
    get,
    init_param,
    optional_bias,
)
from ._linear import contraction_kwargs, default_bias_init, default_kernel_init
from ._module import Module

PaddingLike = str | int | Sequence[int | tuple[int, int]]
Padding = str | tuple[tuple[int, int], ...]

_CONV_PADDINGS = ("SAME", "VALID", "SAME_LOWER", "CIRCULAR", "REFLECT", "CAUSAL")
_TRANSPOSE_PADDINGS = ("SAME", "VALID", "CIRCULAR")


def _per_axis(value: int | Sequence[int] | None, n: int, name: str, layer: str) -> tuple[int, ...]:
    """`value` for each of `n` spatial axes (None means 1, an int is used for all)."""
    if value is None:
        return (1,) * n
    if isinstance(value, int):
        return (value,) * n
    value = tuple(value)
    if len(value) != n:
        raise ValueError(
            f"{layer}: `{name}` must have one entry per spatial axis ({n}); got {value}."
        )
    return value


def canonical_padding(padding: PaddingLike, n: int, layer: str, allowed: Sequence[str]) -> Padding:
    """`padding` as an upper-case mode name or one `(low, high)` pair per spatial axis."""
    if isinstance(padding, str):
        if padding.upper() not in allowed:
            raise ValueError(
                f"{layer}: `padding` must be one of {', '.join(map(repr, allowed))}, an int, or "
                f"one int or (low, high) pair per spatial axis; got {padding!r}."
            )
        return padding.upper()
    if isinstance(padding, int):
        return ((padding, padding),) * n
    pairs = []
    for p in padding:
        if isinstance(p, int):
            pairs.append((p, p))
        elif len(tuple(p)) == 2 and all(isinstance(q, int) for q in p):
            pairs.append(tuple(p))
        else:
            raise ValueError(f"{layer}: `padding` entry {p!r} is neither an int nor a pair.")
    if len(pairs) != n:
        raise ValueError(
            f"{layer}: `padding` needs one entry per spatial axis ({n}); got {padding}."
        )
    return tuple(pairs)


def conv_dimension_numbers(ndim: int) -> lax.ConvDimensionNumbers:
    """Channels-last dimension numbers for inputs of rank `ndim` (batch first)."""
    lhs = (0, ndim - 1, *range(1, ndim - 1))
    rhs = (ndim - 1, ndim - 2, *range(0, ndim - 2))
    return lax.ConvDimensionNumbers(lhs, rhs, lhs)


def _check_mask(mask: jax.Array | None, kernel_shape: tuple[int, ...], layer: str) -> None:
    if mask is not None and tuple(mask.shape) != kernel_shape:
        raise ValueError(
            f"{layer}: `mask` must have the kernel's shape {kernel_shape}; got {tuple(mask.shape)}."
        )


def _masked_kernel(layer: Conv | ConvTranspose) -> jax.Array:
    _check_mask(layer.mask, layer.kernel_shape, type(layer).__name__)
    kernel = layer.kernel[...]
    return kernel if layer.mask is None else kernel * layer.mask


def _pad_inputs(
    x: jax.Array, padding: Padding, kernel_size: tuple[int, ...], dilation: tuple[int, ...]
) -> tuple[jax.Array, Padding]:
    """Apply the paddings `jax.lax` lacks to the inputs; return them and lax's padding."""
    if padding in ("CIRCULAR", "REFLECT"):
        dilated = [(k - 1) * d + 1 for k, d in zip(kernel_size, dilation, strict=True)]
        pads = [(0, 0), *(((k - 1) // 2, k // 2) for k in dilated), (0, 0)]
        mode = "wrap" if padding == "CIRCULAR" else "reflect"
        return jnp.pad(x, pads, mode=mode), "VALID"
    if padding == "CAUSAL":
        left = dilation[0] * (kernel_size[0] - 1)
        return jnp.pad(x, [(0, 0), (left, 0), (0, 0)]), "VALID"
    return x, padding


class Conv(Module):
    """A convolution over the spatial axes of channels-last inputs.

    >>> conv = Conv(3, 8, kernel_size=(3, 3), rngs=Rngs(0))   # doctest: +SKIP
    >>> conv(jnp.ones((2, 16, 16, 3))).shape                    # doctest: +SKIP
    (2, 16, 16, 8)

    Inputs may have several batch axes (flattened for the convolution) or none.

    Args:
        in_features, out_features: channels in and out.
        kernel_size: window size per spatial axis (an int means one spatial axis).
        strides, input_dilation, kernel_dilation: per spatial axis (an int for all).
        padding: 'SAME', 'VALID', 'SAME_LOWER', 'CIRCULAR', 'REFLECT', 'CAUSAL' (one
            spatial axis), an int, or an int or `(low, high)` per axis.
        feature_group_count: grouped convolution (`in_features` must divide evenly).
        mask: an array of the kernel's shape multiplying the kernel.
        conv_general_dilated: the convolution (default `jax.lax.conv_general_dilated`).

    `use_bias`, `dtype`, `param_dtype`, `precision`, `kernel_init`, `bias_init`, `promote_dtype`,
    `preferred_element_type`, `rngs`, `kernel_metadata`, `bias_metadata`: as `Linear`.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | Sequence[int],
        strides: int | Sequence[int] | None = 1,
        *,
        padding: PaddingLike = "SAME",
        input_dilation: int | Sequence[int] | None = 1,
        kernel_dilation: int | Sequence[int] | None = 1,
        feature_group_count: int = 1,
        use_bias: bool = True,
        mask: jax.Array | None = None,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        precision: lax.Precision | None = None,
        kernel_init: initializers.Initializer = default_kernel_init,
        bias_init: initializers.Initializer = default_bias_init,
        conv_general_dilated: Callable[..., jax.Array] = lax.conv_general_dilated,
        promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
        preferred_element_type: jnp.dtype | None = None,
        rngs: RngsArg,
        kernel_metadata: Metadata = NO_METADATA,
        bias_metadata: Metadata = NO_METADATA,
    ) -> None:
        kernel_size = (kernel_size,) if isinstance(kernel_size, int) else tuple(kernel_size)
        n = len(kernel_size)
        if in_features % feature_group_count:
            raise ValueError(
                f"Conv: `in_features`={in_features} must be divisible by "
                f"`feature_group_count`={feature_group_count}."
            )
        self.padding = canonical_padding(padding, n, "Conv", _CONV_PADDINGS)
        if self.padding == "CAUSAL" and n != 1:
            raise ValueError(
                f"Conv: 'CAUSAL' padding needs one spatial axis; `kernel_size` {kernel_size} "
                f"has {n}."
            )
        shape = (*kernel_size, in_features // feature_group_count, out_features)
        _check_mask(mask, shape, "Conv")
        self.kernel_shape = shape
        self.kernel = init_param(kernel_init, rngs, "Conv", shape, param_dtype, kernel_metadata)
        self.bias = optional_bias(
            use_bias, bias_init, rngs, "Conv", (out_features,), param_dtype, bias_metadata
        )
        self.in_features = in_features
        self.out_features = out_features
        self.kernel_size = kernel_size
        self.strides = _per_axis(strides, n, "strides", "Conv")
        self.input_dilation = _per_axis(input_dilation, n, "input_dilation", "Conv")
        self.kernel_dilation = _per_axis(kernel_dilation, n, "kernel_dilation", "Conv")
        self.feature_group_count = feature_group_count
        self.use_bias = use_bias
        self.mask = mask
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.conv_general_dilated = conv_general_dilated
        self.promote_dtype = promote_dtype
        self.preferred_element_type = preferred_element_type

    def __call__(self, inputs: jax.Array, out_sharding: OutSharding | None = None) -> jax.Array:
        batch, x = _one_batch_axis("Conv", inputs, len(self.kernel_size), self.in_features)
        x, padding = _pad_inputs(x, self.padding, self.kernel_size, self.kernel_dilation)
        x, kernel, bias = self.promote_dtype(
            (x, _masked_kernel(self), get(self.bias)), dtype=self.dtype
        )
        y = self.conv_general_dilated(
            x,
            kernel,
            self.strides,
            padding,
            lhs_dilation=self.input_dilation,
            rhs_dilation=self.kernel_dilation,
            dimension_numbers=conv_dimension_numbers(x.ndim),
            feature_group_count=self.feature_group_count,
            precision=self.precision,
            **contraction_kwargs(self.preferred_element_type, out_sharding),
        )
        return _restore_batch(y, bias, batch)


class ConvTranspose(Module):
    """A transposed convolution, to upsample: `jax.lax.conv_transpose` with a learned kernel.

    With `strides=s` and `padding='VALID'` (one spatial axis, kernel size `K`), input
    position `t` adds `x[t] @ kernel[K - 1 - k]` to output position `t * s + k`. With
    'CIRCULAR' the output (`s` times the input's size) wraps around periodically.

    The kernel has shape `(*kernel_size, in_features, out_features)` (swapped with
    `transpose_kernel`), initialised from the `params` stream.

    Args:
        padding: 'SAME', 'VALID', 'CIRCULAR', an int, or an int or `(low, high)` per axis.
        transpose_kernel: flip the spatial axes and swap the feature axes of the kernel,
            giving the exact gradient of a `Conv` with the same kernel.

    `in_features`, `out_features`, `kernel_size`, `strides`, `kernel_dilation`, `mask`, `use_bias`,
    `dtype`, `param_dtype`, `precision`, `kernel_init`, `bias_init`, `promote_dtype`,
    `preferred_element_type`, `rngs`, `kernel_metadata`, `bias_metadata`: as `Conv`.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | Sequence[int],
        strides: int | Sequence[int] | None = None,
        *,
        padding: PaddingLike = "SAME",
        kernel_dilation: int | Sequence[int] | None = None,
        use_bias: bool = True,
        mask: jax.Array | None = None,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        precision: lax.Precision | None = None,
        kernel_init: initializers.Initializer = default_kernel_init,
        bias_init: initializers.Initializer = default_bias_init,
        transpose_kernel: bool = False,
        promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
        preferred_element_type: jnp.dtype | None = None,
        rngs: RngsArg,
        kernel_metadata: Metadata = NO_METADATA,
        bias_metadata: Metadata = NO_METADATA,
    ) -> None:
        kernel_size = (kernel_size,) if isinstance(kernel_size, int) else tuple(kernel_size)
        n = len(kernel_size)
        features = (out_features, in_features) if transpose_kernel else (in_features, out_features)
        shape = (*kernel_size, *features)
        _check_mask(mask, shape, "ConvTranspose")
        self.padding = canonical_padding(padding, n, "ConvTranspose", _TRANSPOSE_PADDINGS)
        self.kernel_shape = shape
        self.kernel = init_param(
            kernel_init, rngs, "ConvTranspose", shape, param_dtype, kernel_metadata
        )
        self.bias = optional_bias(
            use_bias, bias_init, rngs, "ConvTranspose", (out_features,), param_dtype, bias_metadata
        )
        self.in_features = in_features
        self.out_features = out_features
        self.kernel_size = kernel_size
        self.strides = _per_axis(strides, n, "strides", "ConvTranspose")
        self.kernel_dilation = _per_axis(kernel_dilation, n, "kernel_dilation", "ConvTranspose")
        self.use_bias = use_bias
        self.mask = mask
        self.transpose_kernel = transpose_kernel
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.promote_dtype = promote_dtype
        self.preferred_element_type = preferred_element_type

    def __call__(self, inputs: jax.Array) -> jax.Array:
        n = len(self.kernel_size)
        batch, x = _one_batch_axis("ConvTranspose", inputs, n, self.in_features)
        x, kernel, bias = self.promote_dtype(
            (x, _masked_kernel(self), get(self.bias)), dtype=self.dtype
        )
        circular = self.padding == "CIRCULAR"
        y = lax.conv_transpose(
            x,
            kernel,
            self.strides,
            "VALID" if circular else self.padding,
            rhs_dilation=self.kernel_dilation,
            transpose_kernel=self.transpose_kernel,
            precision=self.precision,
            preferred_element_type=self.preferred_element_type,
        )
        if circular:
            periods = [size * s for size, s in zip(x.shape[1:-1], self.strides, strict=True)]
            y = _wrap_periodically(y, periods, self.transpose_kernel)
        return _restore_batch(y, bias, batch)


def _wrap_periodically(y: jax.Array, periods: list[int], transpose_kernel: bool) -> jax.Array:
    """Fold `y`'s spatial axes onto `periods` (circular boundaries), summing what wraps.

    Each axis is first padded to a whole number of periods, placed so the input's start
    sits on a period boundary; the odd element of an even split goes left, or right with
    `transpose_kernel` (which mirrors a regular convolution).
    """
    diffs = [
        -(size - period) % (2 * period) for size, period in zip(y.shape[1:-1], periods, strict=True)
    ]
    if transpose_kernel:
        pads = [(d // 2, (d + 1) // 2) for d in diffs]
    else:
        pads = [((d + 1) // 2, d // 2) for d in diffs]
    y = jnp.pad(y, [(0, 0), *pads, (0, 0)])
    for axis, period in enumerate(periods, start=1):
        y = y.reshape(*y.shape[:axis], -1, period, *y.shape[axis + 1 :]).sum(axis=axis)
    return y


def _one_batch_axis(
    layer: str, inputs: jax.Array, spatial: int, in_features: int
) -> tuple[tuple[int, ...], jax.Array]:
    """Check the inputs' shape; return their batch shape and them with one batch axis."""
    if inputs.ndim < spatial + 1 or inputs.shape[-1] != in_features:
        raise ValueError(
            f"{layer} expects inputs of shape (*batch, {spatial} spatial axes, "
            f"{in_features}); got {tuple(inputs.shape)}."
        )
    batch = inputs.shape[: inputs.ndim - spatial - 1]
    if len(batch) == 1:
        return batch, inputs
    return batch, inputs.reshape(-1, *inputs.shape[len(batch) :])


def _restore_batch(y: jax.Array, bias: jax.Array | None, batch: tuple[int, ...]) -> jax.Array:
    """Add the bias and give the output back its original batch axes."""
    if bias is not None:
        y = add_bias(y, bias, (1,) * (y.ndim - bias.ndim) + bias.shape)
    if len(batch) == 1:
        return y
    return y.reshape(*batch, *y.shape[1:])
