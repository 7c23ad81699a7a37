"""Dense layers: `Linear` (`x @ kernel + bias`) and `LinearGeneral` (over several axes).

Parameters are `Param`s initialised from the `params` stream of the `Rngs` passed at
construction; sizes are static attributes, so they live in the GraphDef.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax import lax

from bryo_graph import Param

from . import initializers
from ._common import RngsArg, canonical_axes, optional_bias, params_key, promote_dtype
from ._module import Module

default_kernel_init = initializers.lecun_normal()
default_bias_init = initializers.zeros


class Linear(Module):
    """`y = x @ kernel + bias` over the last axis of `x`.

    >>> layer = Linear(3, 4, rngs=Rngs(0))          # doctest: +SKIP
    >>> layer(jnp.ones((2, 3))).shape               # doctest: +SKIP
    (2, 4)

    Args:
        in_features: size of the last axis of the input.
        out_features: size of the last axis of the output.
        use_bias: add a bias (a `Param` of shape `(out_features,)`).
        dtype: computation dtype (default: the inputs' and parameters' common type).
        param_dtype: dtype of the parameters.
        precision: `jax.lax.Precision` of the matmul.
        kernel_init, bias_init: initializers `(key, shape, dtype) -> array`.
        rngs: the `Rngs` whose `params` stream initialises the parameters.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        use_bias: bool = True,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        precision: lax.Precision | None = None,
        kernel_init: initializers.Initializer = default_kernel_init,
        bias_init: initializers.Initializer = default_bias_init,
        rngs: RngsArg,
    ) -> None:
        self.kernel = Param(
            kernel_init(params_key(rngs, "Linear"), (in_features, out_features), param_dtype)
        )
        self.bias = optional_bias(use_bias, bias_init, rngs, "Linear", (out_features,), param_dtype)
        self.in_features = in_features
        self.out_features = out_features
        self.use_bias = use_bias
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision

    def __call__(self, inputs: jax.Array) -> jax.Array:
        if inputs.shape[-1:] != (self.in_features,):
            raise ValueError(
                f"Linear expects inputs whose last axis is `in_features`={self.in_features}; "
                f"got shape {tuple(inputs.shape)}."
            )
        bias = None if self.bias is None else self.bias.value
        x, kernel, bias = promote_dtype(self.dtype, inputs, self.kernel.value, bias)
        y = lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())), precision=self.precision)
        return y if bias is None else y + bias


def _as_tuple(value: int | Sequence[int]) -> tuple[int, ...]:
    return (value,) if isinstance(value, int) else tuple(value)


class LinearGeneral(Module):
    """A dense layer contracting `axis` of the input (one or several) with a kernel.

    `kernel` has shape `(*in_features, *out_features)`; the output puts `out_features` in
    place of the contracted axes, at the end (MultiHeadAttention projects to
    `(num_heads, head_dim)` with it).

    Args:
        in_features: sizes of the contracted input axes (an int or a tuple).
        out_features: sizes of the new output axes (an int or a tuple).
        axis: the input axes to contract, as many as `in_features` (default: the last ones).
        use_bias, dtype, param_dtype, precision, kernel_init, bias_init, rngs: as `Linear`.
    """

    def __init__(
        self,
        in_features: int | Sequence[int],
        out_features: int | Sequence[int],
        *,
        axis: int | Sequence[int] = -1,
        use_bias: bool = True,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        precision: lax.Precision | None = None,
        kernel_init: initializers.Initializer = default_kernel_init,
        bias_init: initializers.Initializer = default_bias_init,
        rngs: RngsArg,
    ) -> None:
        in_shape, out_shape, axes = _as_tuple(in_features), _as_tuple(out_features), _as_tuple(axis)
        if len(axes) != len(in_shape):
            raise ValueError(
                f"LinearGeneral: `axis` {axes} must name one input axis per entry of "
                f"`in_features` {in_shape}."
            )
        self.kernel = Param(
            _init_flat(
                kernel_init, params_key(rngs, "LinearGeneral"), in_shape, out_shape, param_dtype
            )
        )
        self.bias = optional_bias(
            use_bias, bias_init, rngs, "LinearGeneral", out_shape, param_dtype
        )
        self.in_features = in_shape
        self.out_features = out_shape
        self.axis = axes
        self.use_bias = use_bias
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision

    def __call__(self, inputs: jax.Array) -> jax.Array:
        axes = canonical_axes(self.axis, inputs.ndim)
        got = tuple(inputs.shape[a] for a in axes)
        if got != self.in_features:
            raise ValueError(
                f"LinearGeneral expects input axes {self.axis} of sizes {self.in_features}; "
                f"got {got} in shape {tuple(inputs.shape)}."
            )
        bias = None if self.bias is None else self.bias.value
        x, kernel, bias = promote_dtype(self.dtype, inputs, self.kernel.value, bias)
        contract = (axes, tuple(range(len(axes))))
        y = lax.dot_general(x, kernel, (contract, ((), ())), precision=self.precision)
        return y if bias is None else y + bias


def _init_flat(
    init: initializers.Initializer,
    key: jax.Array,
    in_shape: tuple[int, ...],
    out_shape: tuple[int, ...],
    dtype: jnp.dtype,
) -> jax.Array:
    """Initialise as a 2-D `(fan_in, fan_out)` kernel, so fan-based scalings see the true fans."""
    fan_in = 1
    for n in in_shape:
        fan_in *= n
    fan_out = 1
    for n in out_shape:
        fan_out *= n
    return init(key, (fan_in, fan_out), dtype).reshape(*in_shape, *out_shape)
