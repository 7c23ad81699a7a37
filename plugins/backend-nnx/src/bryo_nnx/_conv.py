"""`Conv`: N-dimensional convolution over inputs laid out `(*batch, *spatial, features)`.

The kernel has shape `(*kernel_size, in_features // feature_group_count, out_features)`
and is initialised from the `params` stream.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax import lax

from bryo_graph import Param

from . import initializers
from ._common import RngsArg, optional_bias, params_key, promote_dtype
from ._linear import default_bias_init, default_kernel_init
from ._module import Module

PaddingLike = str | int | Sequence[int | tuple[int, int]]


def _tuple(value: int | Sequence[int] | None, n: int, name: str) -> tuple[int, ...]:
    if value is None:
        return (1,) * n
    if isinstance(value, int):
        return (value,) * n
    value = tuple(value)
    if len(value) != n:
        raise ValueError(f"Conv: `{name}` must have one entry per spatial axis ({n}); got {value}.")
    return value


def _padding(padding: PaddingLike, n: int) -> str | tuple[tuple[int, int], ...]:
    if isinstance(padding, str):
        if padding.upper() not in ("SAME", "VALID", "SAME_LOWER"):
            raise ValueError(
                f"Conv: `padding` must be 'SAME', 'VALID', 'SAME_LOWER', an int or a sequence "
                f"of (low, high) pairs; got {padding!r}."
            )
        return padding.upper()
    if isinstance(padding, int):
        return ((padding, padding),) * n
    pairs = tuple((p, p) if isinstance(p, int) else tuple(p) for p in padding)
    if len(pairs) != n:
        raise ValueError(f"Conv: `padding` needs one entry per spatial axis ({n}); got {padding}.")
    return pairs  # type: ignore[return-value]


def conv_dimension_numbers(ndim: int) -> lax.ConvDimensionNumbers:
    """Channels-last dimension numbers for inputs of rank `ndim` (batch first)."""
    lhs = (0, ndim - 1, *range(1, ndim - 1))
    rhs = (ndim - 1, ndim - 2, *range(0, ndim - 2))
    return lax.ConvDimensionNumbers(lhs, rhs, lhs)


class Conv(Module):
    """A convolution over the spatial axes of channels-last inputs.

    >>> conv = Conv(3, 8, kernel_size=(3, 3), rngs=Rngs(0))   # doctest: +SKIP
    >>> conv(jnp.ones((2, 16, 16, 3))).shape                    # doctest: +SKIP
    (2, 16, 16, 8)

    Args:
        in_features, out_features: channels in and out.
        kernel_size: window size per spatial axis (an int means one spatial axis).
        strides, input_dilation, kernel_dilation: per spatial axis (an int for all).
        padding: 'SAME', 'VALID', 'SAME_LOWER', an int, or `(low, high)` per axis.
        feature_group_count: grouped convolution (`in_features` must divide evenly).
        use_bias, dtype, param_dtype, precision, kernel_init, bias_init, rngs: as `Linear`.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | Sequence[int],
        strides: int | Sequence[int] = 1,
        *,
        padding: PaddingLike = "SAME",
        input_dilation: int | Sequence[int] = 1,
        kernel_dilation: int | Sequence[int] = 1,
        feature_group_count: int = 1,
        use_bias: bool = True,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        precision: lax.Precision | None = None,
        kernel_init: initializers.Initializer = default_kernel_init,
        bias_init: initializers.Initializer = default_bias_init,
        rngs: RngsArg,
    ) -> None:
        kernel_size = (kernel_size,) if isinstance(kernel_size, int) else tuple(kernel_size)
        n = len(kernel_size)
        if in_features % feature_group_count:
            raise ValueError(
                f"Conv: `in_features`={in_features} must be divisible by "
                f"`feature_group_count`={feature_group_count}."
            )
        shape = (*kernel_size, in_features // feature_group_count, out_features)
        self.kernel = Param(kernel_init(params_key(rngs, "Conv"), shape, param_dtype))
        self.bias = optional_bias(use_bias, bias_init, rngs, "Conv", (out_features,), param_dtype)
        self.in_features = in_features
        self.out_features = out_features
        self.kernel_size = kernel_size
        self.strides = _tuple(strides, n, "strides")
        self.padding = _padding(padding, n)
        self.input_dilation = _tuple(input_dilation, n, "input_dilation")
        self.kernel_dilation = _tuple(kernel_dilation, n, "kernel_dilation")
        self.feature_group_count = feature_group_count
        self.use_bias = use_bias
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision

    def __call__(self, inputs: jax.Array) -> jax.Array:
        n = len(self.kernel_size)
        batch, x = _one_batch_axis(type(self).__name__, inputs, n, self.in_features)
        bias = None if self.bias is None else self.bias.value
        x, kernel, bias = promote_dtype(self.dtype, x, self.kernel.value, bias)
        y = lax.conv_general_dilated(
            x,
            kernel,
            window_strides=self.strides,
            padding=self.padding,
            lhs_dilation=self.input_dilation,
            rhs_dilation=self.kernel_dilation,
            dimension_numbers=conv_dimension_numbers(x.ndim),
            feature_group_count=self.feature_group_count,
            precision=self.precision,
        )
        return _restore_batch(y, bias, batch)


class ConvTranspose(Module):
    """A transposed convolution, to upsample: `jax.lax.conv_transpose` with a learned kernel.

    With `strides=s` and `padding='VALID'` (one spatial axis, kernel size `K`), input
    position `t` adds `x[t] @ kernel[K - 1 - k]` to output position `t * s + k`.

    The kernel has shape `(*kernel_size, in_features, out_features)`, initialised from
    the `params` stream.

    Args:
        in_features, out_features, kernel_size, strides, padding, kernel_dilation,
        use_bias, dtype, param_dtype, precision, kernel_init, bias_init, rngs: as `Conv`.
        transpose_kernel: flip the spatial axes and swap the feature axes of the kernel,
            giving the exact gradient of a `Conv` with the same kernel.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | Sequence[int],
        strides: int | Sequence[int] = 1,
        *,
        padding: PaddingLike = "SAME",
        kernel_dilation: int | Sequence[int] = 1,
        use_bias: bool = True,
        transpose_kernel: bool = False,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        precision: lax.Precision | None = None,
        kernel_init: initializers.Initializer = default_kernel_init,
        bias_init: initializers.Initializer = default_bias_init,
        rngs: RngsArg,
    ) -> None:
        kernel_size = (kernel_size,) if isinstance(kernel_size, int) else tuple(kernel_size)
        n = len(kernel_size)
        shape = (*kernel_size, in_features, out_features)
        if transpose_kernel:
            shape = (*kernel_size, out_features, in_features)
        self.kernel = Param(kernel_init(params_key(rngs, "ConvTranspose"), shape, param_dtype))
        self.bias = optional_bias(
            use_bias, bias_init, rngs, "ConvTranspose", (out_features,), param_dtype
        )
        self.in_features = in_features
        self.out_features = out_features
        self.kernel_size = kernel_size
        self.strides = _tuple(strides, n, "strides")
        self.padding = _padding(padding, n)
        self.kernel_dilation = _tuple(kernel_dilation, n, "kernel_dilation")
        self.use_bias = use_bias
        self.transpose_kernel = transpose_kernel
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision

    def __call__(self, inputs: jax.Array) -> jax.Array:
        n = len(self.kernel_size)
        batch, x = _one_batch_axis(type(self).__name__, inputs, n, self.in_features)
        bias = None if self.bias is None else self.bias.value
        x, kernel, bias = promote_dtype(self.dtype, x, self.kernel.value, bias)
        spatial = "".join("HWDXYZ"[i] for i in range(n)) if n <= 6 else None
        if spatial is None:
            raise ValueError("ConvTranspose supports at most 6 spatial axes.")
        y = lax.conv_transpose(
            x,
            kernel,
            self.strides,
            self.padding,
            rhs_dilation=self.kernel_dilation,
            dimension_numbers=(f"N{spatial}C", f"{spatial}IO", f"N{spatial}C"),
            transpose_kernel=self.transpose_kernel,
            precision=self.precision,
        )
        return _restore_batch(y, bias, batch)


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
    return batch, inputs.reshape(-1, *inputs.shape[len(batch) :])


def _restore_batch(y: jax.Array, bias: jax.Array | None, batch: tuple[int, ...]) -> jax.Array:
    """Add the bias and give the output back its original batch axes."""
    if bias is not None:
        y = y + bias
    return y.reshape(*batch, *y.shape[1:])
