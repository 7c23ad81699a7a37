"""Dense layers: `Linear` (`x @ kernel + bias`), `LinearGeneral` (over several axes) and
`Einsum` (an einsum equation with a learned kernel).

Parameters are `Param`s initialised from the `params` stream of the `Rngs` passed at
construction, in Flax's order (kernel, then bias), so the same seed gives Flax's numbers;
`kernel_metadata` / `bias_metadata` become the Params' metadata (e.g. `sharding`). Sizes
are static attributes, so they live in the GraphDef. Calls take `out_sharding` (passed on
to the contraction) for explicitly sharded meshes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar, TypedDict

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import DTypeLike

from bryo_graph import Param

from . import dtypes, initializers
from ._common import (
    NO_METADATA,
    Metadata,
    OutSharding,
    RngsArg,
    add_bias,
    first_given,
    get,
    init_param,
    optional_bias,
    params_key,
)
from ._module import Module

default_kernel_init = initializers.default_kernel_init
default_bias_init = initializers.default_bias_init

DotGeneral = Callable[..., jax.Array]


class ContractionKwargs(TypedDict, total=False):
    """The optional keywords `contraction_kwargs` gives a contraction."""

    preferred_element_type: DTypeLike
    out_sharding: OutSharding


def contraction_kwargs(
    preferred_element_type: DTypeLike | None, out_sharding: OutSharding | None
) -> ContractionKwargs:
    """The optional keywords of a `dot_general`/`einsum`/conv call: only those that are set,
    so custom contraction functions without them keep working."""
    kwargs: ContractionKwargs = {}
    if preferred_element_type is not None:
        kwargs["preferred_element_type"] = preferred_element_type
    if out_sharding is not None:
        kwargs["out_sharding"] = out_sharding
    return kwargs


def _as_tuple(value: int | Sequence[int]) -> tuple[int, ...]:
    return (value,) if isinstance(value, int) else tuple(value)


def _sorted_axes(axes: Sequence[int], ndim: int) -> tuple[int, ...]:
    return tuple(sorted(a % ndim for a in axes))


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
        dot_general: the contraction (default `jax.lax.dot_general`).
        promote_dtype: casts `(inputs, kernel, bias)` to the computation dtype
            (`bryo_nnx.dtypes.promote_dtype` or a function with its signature).
        preferred_element_type: the dtype the contraction accumulates and returns.
        rngs: the `Rngs` whose `params` stream initialises the parameters.
        kernel_metadata, bias_metadata: metadata of the `kernel` / `bias` Params.

    In MoX a Linear's call also reports `features` (the output size, Flax Linen's name
    for it), so `//module_call[@features=10]` finds it as it finds a Linen `Dense`.
    """

    #: MoX attribute aliases, alias -> attribute (see `_intercept.static_attributes`).
    _mox_aliases: ClassVar[Mapping[str, str]] = {"features": "out_features"}

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
        dot_general: DotGeneral = lax.dot_general,
        promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
        preferred_element_type: jnp.dtype | None = None,
        rngs: RngsArg,
        kernel_metadata: Metadata = NO_METADATA,
        bias_metadata: Metadata = NO_METADATA,
    ) -> None:
        self.kernel = init_param(
            kernel_init, rngs, "Linear", (in_features, out_features), param_dtype, kernel_metadata
        )
        self.bias = optional_bias(
            use_bias, bias_init, rngs, "Linear", (out_features,), param_dtype, bias_metadata
        )
        self.in_features = in_features
        self.out_features = out_features
        self.use_bias = use_bias
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.dot_general = dot_general
        self.promote_dtype = promote_dtype
        self.preferred_element_type = preferred_element_type

    def __call__(self, inputs: jax.Array, out_sharding: OutSharding | None = None) -> jax.Array:
        kernel = self.kernel[...]
        # The kernel's own input axis, not `in_features`: inside `shard_map` a kernel
        # sharded along it holds only this device's slice (tensor parallelism).
        kernel_in = kernel.shape[0]
        if inputs.shape[-1:] != (kernel_in,):
            shard = "" if kernel_in == self.in_features else f" ({kernel_in} in this shard)"
            raise ValueError(
                f"Linear expects inputs whose last axis is `in_features`={self.in_features}"
                f"{shard}; got shape {tuple(inputs.shape)}."
            )
        x, kernel, bias = self.promote_dtype((inputs, kernel, get(self.bias)), dtype=self.dtype)
        y = self.dot_general(
            x,
            kernel,
            (((x.ndim - 1,), (0,)), ((), ())),
            precision=self.precision,
            **contraction_kwargs(self.preferred_element_type, out_sharding),
        )
        if bias is not None:
            y = add_bias(y, bias, (1,) * (y.ndim - 1) + (-1,))
        return y


class LinearGeneral(Module):
    """A dense layer contracting `axis` of the input (one or several) with a kernel.

    `kernel` has shape `(*batch_axis sizes, *in_features, *out_features)`; the output
    puts `out_features` in place of the contracted axes, at the end (MultiHeadAttention
    projects to `(num_heads, head_dim)` with it). Initializers see the kernel as a 2-D
    `(fan_in, fan_out)` matrix, so fan-based scalings use the true fans.

    Args:
        in_features: sizes of the contracted input axes (an int or a tuple).
        out_features: sizes of the new output axes (an int or a tuple).
        axis: the input axes to contract, as many as `in_features` (default: the last ones).
        batch_axis: `{axis: size}` of leading input axes that keep their own kernel slice
            (consecutive from 0).
        dot_general, dot_general_cls: the contraction function, or a class whose instances
            are one (default `jax.lax.dot_general`).

    `use_bias`, `dtype`, `param_dtype`, `precision`, `kernel_init`, `bias_init`, `promote_dtype`,
    `preferred_element_type`, `rngs`, `kernel_metadata`, `bias_metadata`: as `Linear`.
    """

    def __init__(
        self,
        in_features: int | Sequence[int],
        out_features: int | Sequence[int],
        *,
        axis: int | Sequence[int] = -1,
        batch_axis: Mapping[int, int] | None = None,
        use_bias: bool = True,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        kernel_init: initializers.Initializer = default_kernel_init,
        bias_init: initializers.Initializer = default_bias_init,
        precision: lax.Precision | None = None,
        promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
        dot_general: DotGeneral | None = None,
        dot_general_cls: Callable[[], DotGeneral] | None = None,
        preferred_element_type: jnp.dtype | None = None,
        rngs: RngsArg,
        kernel_metadata: Metadata = NO_METADATA,
        bias_metadata: Metadata = NO_METADATA,
    ) -> None:
        in_shape, out_shape, axes = _as_tuple(in_features), _as_tuple(out_features), _as_tuple(axis)
        if len(axes) != len(in_shape):
            raise ValueError(
                f"LinearGeneral: `axis` {axes} must name one input axis per entry of "
                f"`in_features` {in_shape}."
            )
        batch = dict(batch_axis or {})
        if batch and set(batch) != set(range(max(batch) + 1)):
            raise ValueError(
                f"LinearGeneral: the keys of `batch_axis` must be the leading axes 0, 1, ...; "
                f"got {sorted(batch)}."
            )
        batch_shape = tuple(batch.values())
        self.kernel = Param(
            _init_flat(
                kernel_init,
                params_key(rngs, "LinearGeneral"),
                (*batch_shape, *in_shape),
                out_shape,
                param_dtype,
            ),
            **kernel_metadata,
        )
        self.bias = None
        if use_bias:
            bias = _init_flat(
                bias_init,
                params_key(rngs, "LinearGeneral"),
                (),
                (*batch_shape, *out_shape),
                param_dtype,
                one_axis=True,
            )
            self.bias = Param(bias, **bias_metadata)
        self.in_features = in_shape
        self.out_features = out_shape
        self.axis = axes
        self.batch_axis = tuple(batch.items())
        self.use_bias = use_bias
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.promote_dtype = promote_dtype
        self.dot_general = dot_general
        self.dot_general_cls = dot_general_cls
        self.preferred_element_type = preferred_element_type

    def __call__(self, inputs: jax.Array, out_sharding: OutSharding | None = None) -> jax.Array:
        ndim = inputs.ndim
        axes = _sorted_axes(self.axis, ndim)
        got = tuple(inputs.shape[a % ndim] for a in self.axis)
        if got != self.in_features:
            raise ValueError(
                f"LinearGeneral expects input axes {self.axis} of sizes {self.in_features}; "
                f"got {got} in shape {tuple(inputs.shape)}."
            )
        batch_axes = _sorted_axes([a for a, _ in self.batch_axis], ndim)
        n_batch = len(batch_axes)
        x, kernel, bias = self.promote_dtype(
            (inputs, self.kernel[...], get(self.bias)), dtype=self.dtype
        )
        if self.dot_general_cls is not None:
            dot_general = self.dot_general_cls()
        else:
            dot_general = self.dot_general or lax.dot_general
        contract = (axes, tuple(range(n_batch, n_batch + len(axes))))
        y = dot_general(
            x,
            kernel,
            (contract, (batch_axes, tuple(range(n_batch)))),
            precision=self.precision,
            **contraction_kwargs(self.preferred_element_type, out_sharding),
        )
        if bias is not None:
            kept = [x.shape[a] if a in batch_axes else 1 for a in range(ndim) if a not in axes]
            y = add_bias(y, bias, (*kept, *self.out_features))
        return y


def _init_flat(
    init: initializers.Initializer,
    key: jax.Array,
    in_shape: tuple[int, ...],
    out_shape: tuple[int, ...],
    dtype: jnp.dtype,
    *,
    one_axis: bool = False,
) -> jax.Array:
    """Initialise as a 2-D `(fan_in, fan_out)` matrix (or a 1-D vector with `one_axis`) and
    reshape to `(*in_shape, *out_shape)`."""
    flat = (math.prod(out_shape),) if one_axis else (math.prod(in_shape), math.prod(out_shape))
    return jnp.reshape(init(key, flat, dtype), (*in_shape, *out_shape))


class Einsum(Module):
    """`y = einsum(einsum_str, x, kernel) + bias`: a learned kernel in an einsum equation.

    >>> layer = Einsum("nta,hab->nthb", (8, 2, 4), (8, 4), rngs=Rngs(0))  # doctest: +SKIP
    >>> layer(jnp.ones((16, 11, 2))).shape                                 # doctest: +SKIP
    (16, 11, 8, 4)

    The equation names two operands, the input then the kernel, and the output
    explicitly (`->`). The bias is broadcast over the output axes that do not come from
    the kernel.

    Args:
        einsum_str: the equation (or give it per call instead).
        kernel_shape: the kernel's shape.
        bias_shape: the bias's shape (the kernel's output axes); None for no bias.
        einsum_op: the einsum function (default `jnp.einsum`).

    `dtype`, `param_dtype`, `precision`, `kernel_init`, `bias_init`, `promote_dtype`,
    `preferred_element_type`, `rngs`, `kernel_metadata`, `bias_metadata`: as `Linear`.
    """

    def __init__(
        self,
        einsum_str: str,
        kernel_shape: int | Sequence[int],
        bias_shape: int | Sequence[int] | None = None,
        *,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        precision: lax.Precision | None = None,
        kernel_init: initializers.Initializer = default_kernel_init,
        bias_init: initializers.Initializer = default_bias_init,
        promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
        einsum_op: Callable[..., jax.Array] = jnp.einsum,
        preferred_element_type: jnp.dtype | None = None,
        rngs: RngsArg,
        kernel_metadata: Metadata = NO_METADATA,
        bias_metadata: Metadata = NO_METADATA,
    ) -> None:
        einsum_str = _check_equation(einsum_str)
        kernel_shape = _as_tuple(kernel_shape)
        self.kernel = init_param(
            kernel_init, rngs, "Einsum", kernel_shape, param_dtype, kernel_metadata
        )
        self.bias = None
        if bias_shape is not None:
            bias_shape = _as_tuple(bias_shape)
            self.bias = init_param(
                bias_init, rngs, "Einsum", bias_shape, param_dtype, bias_metadata
            )
        self.einsum_str = einsum_str
        self.kernel_shape = kernel_shape
        self.bias_shape = bias_shape
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.promote_dtype = promote_dtype
        self.einsum_op = einsum_op
        self.preferred_element_type = preferred_element_type

    def __call__(
        self,
        inputs: jax.Array,
        einsum_str: str | None = None,
        out_sharding: OutSharding | None = None,
    ) -> jax.Array:
        """Apply the layer; `einsum_str` replaces the construction-time equation."""
        equation = _check_equation(
            first_given(einsum_str, self.einsum_str, layer="Einsum", name="einsum_str")
        )
        x, kernel, bias = self.promote_dtype(
            (inputs, self.kernel[...], get(self.bias)), dtype=self.dtype
        )
        y = self.einsum_op(
            equation,
            x,
            kernel,
            precision=self.precision,
            **contraction_kwargs(self.preferred_element_type, out_sharding),
        )
        if bias is not None:
            y = add_bias(y, bias, _bias_broadcast_shape(equation, x.ndim, self.kernel_shape))
        return y


def _check_equation(einsum_str: object) -> str:
    if not isinstance(einsum_str, str):
        raise TypeError(f"Einsum: `einsum_str` must be a str; got {type(einsum_str).__name__}.")
    equation = einsum_str.replace(" ", "")
    if "->" not in equation:
        raise ValueError(
            f"Einsum: `einsum_str` {einsum_str!r} must be explicit, with '->' and the output "
            "labels (e.g. 'bi,io->bo')."
        )
    if equation.count(",") != 1:
        raise ValueError(
            f"Einsum: `einsum_str` {einsum_str!r} must have exactly two operands, the input "
            f"and the kernel (one ','); it has {equation.count(',') + 1}."
        )
    return equation


_FREE_LABELS = "".join(chr(c) for c in range(ord("A"), ord("Z") + 1)) + "".join(
    chr(c) for c in range(ord("a"), ord("z") + 1)
)


def _bias_broadcast_shape(
    equation: str, lhs_ndim: int, kernel_shape: tuple[int, ...]
) -> tuple[int, ...]:
    """The bias's shape broadcast against the output: the kernel's size for each output
    label that comes from the kernel, 1 elsewhere (ellipses expanded, aligned right)."""
    operands, result = equation.split("->")
    lhs, rhs = operands.split(",")
    used = set(lhs + rhs + result)
    free = [c for c in _FREE_LABELS if c not in used]
    n_lhs = lhs_ndim - (len(lhs) - 3) if "..." in lhs else 0
    n_rhs = len(kernel_shape) - (len(rhs) - 3) if "..." in rhs else 0
    ellipsis = free[: max(n_lhs, n_rhs)]
    rhs = rhs.replace("...", "".join(ellipsis[len(ellipsis) - n_rhs :]))
    result = result.replace("...", "".join(ellipsis))
    kernel_axis = {label: i for i, label in enumerate(rhs)}
    return tuple(kernel_shape[kernel_axis[c]] if c in kernel_axis else 1 for c in result)
