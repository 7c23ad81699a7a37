"""Normalization layers: `LayerNorm`, `RMSNorm`, `BatchNorm`, `GroupNorm`, `InstanceNorm`.

Each normalises its inputs with statistics over some axes and applies a learned
per-feature `scale` and `bias` (`Param`s): `(x - mean) * rsqrt(var + eps) * scale + bias`.
They differ only in the axes: LayerNorm and RMSNorm (no mean) reduce each example's
features, InstanceNorm every axis but the batch and the features, GroupNorm groups of
features, and BatchNorm the batch, keeping running `mean` and `var` as `BatchStat`s
(updated in place while training, used instead of batch statistics when
`use_running_average` is True, which `model.eval()` sets).

Statistics are computed in at least `float32`, as Flax does. `use_fast_variance` takes the
variance as `E[x²] - E[x]²` in one pass (the default) instead of `E[(x - E[x])²]`; `mask`
(at call) restricts the statistics to some positions; `axis_name` averages them over a
mapped axis (`vmap`, `pmap`, `shard_map`).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax import lax

from bryo_graph import BatchStat, Param

from . import dtypes, initializers
from ._common import (
    NO_METADATA,
    Metadata,
    RngsArg,
    first_given,
    get,
    params_key,
    standard_result_type,
)
from ._module import Module

Axes = int | Sequence[int]


def canonical_axes(ndim: int, axes: Axes) -> tuple[int, ...]:
    """`axes` as sorted, distinct, non-negative ints for an array of rank `ndim`."""
    if isinstance(axes, int):
        axes = (axes,)
    return tuple(sorted({a % ndim for a in axes}))


def _abs_square(x: jax.Array) -> jax.Array:
    if jnp.iscomplexobj(x):
        return lax.square(lax.real(x)) + lax.square(lax.imag(x))
    return lax.square(x)


def compute_stats(
    x: jax.Array,
    axes: Axes,
    dtype: jnp.dtype | None,
    axis_name: str | None = None,
    axis_index_groups: object = None,
    *,
    use_mean: bool = True,
    use_fast_variance: bool = True,
    mask: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """The mean and variance of `x` over `axes` (reduced away), in at least float32.

    Without `use_mean` the mean is zero and the variance is `E[|x|²]` (RMSNorm). With
    `axis_name`, the statistics are averaged over that mapped axis in one `pmean`.
    """
    dtype = standard_result_type(dtype if dtype is not None else jnp.result_type(x), jnp.float32)
    x = jnp.asarray(x, dtype)
    axes = canonical_axes(x.ndim, axes)

    def mean(*arrays: jax.Array) -> tuple[jax.Array, ...]:
        means = tuple(a.mean(axes, where=mask) for a in arrays)
        if axis_name is None:
            return means
        if len(means) == 1:
            return (lax.pmean(means[0], axis_name, axis_index_groups=axis_index_groups),)
        stacked = lax.pmean(jnp.stack(means), axis_name, axis_index_groups=axis_index_groups)
        return tuple(stacked[i] for i in range(len(means)))

    if not use_mean:
        (var,) = mean(_abs_square(x))
        return jnp.zeros_like(var), var
    if use_fast_variance:
        mu, mu2 = mean(x, _abs_square(x))
        return mu, jnp.maximum(0.0, mu2 - _abs_square(mu))  # round-off can make it negative
    (mu,) = mean(x)
    (var,) = mean(_abs_square(x - jnp.expand_dims(mu, axes)))
    return mu, var


def normalize(
    x: jax.Array,
    mean: jax.Array,
    var: jax.Array,
    scale: jax.Array | None,
    bias: jax.Array | None,
    reduction_axes: Axes,
    feature_axes: Axes,
    dtype: jnp.dtype | None,
    epsilon: float,
) -> jax.Array:
    """`(x - mean) * rsqrt(var + epsilon) * scale + bias`, statistics broadcast over
    `reduction_axes` and `scale`/`bias` laid along `feature_axes`."""
    reduction_axes = canonical_axes(x.ndim, reduction_axes)
    feature_axes = canonical_axes(x.ndim, feature_axes)
    stats_shape = tuple(1 if a in reduction_axes else n for a, n in enumerate(x.shape))
    feature_shape = tuple(n if a in feature_axes else 1 for a, n in enumerate(x.shape))
    # Each step computes in the dtype standard promotion gives its operands (`bfloat16`
    # inputs with `float32` statistics compute in `float32`), cast explicitly.
    y, m = dtypes.promote_dtype((x, mean.reshape(stats_shape)), inexact=False)
    y = y - m
    multiplier = lax.rsqrt(var.reshape(stats_shape) + epsilon)
    present = [x]
    if scale is not None:
        scale = scale.reshape(feature_shape)
        multiplier, s = dtypes.promote_dtype((multiplier, scale), inexact=False)
        multiplier = multiplier * s
        present.append(scale)
    y, multiplier = dtypes.promote_dtype((y, multiplier), inexact=False)
    y = y * multiplier
    if bias is not None:
        bias = bias.reshape(feature_shape)
        y, b = dtypes.promote_dtype((y, bias), inexact=False)
        y = y + b
        present.append(bias)
    return jnp.asarray(y, dtypes.canonicalize_dtype(*present, dtype=dtype))


def scale_and_bias(
    layer: str,
    num_features: int,
    *,
    use_scale: bool,
    use_bias: bool,
    scale_init: initializers.Initializer,
    bias_init: initializers.Initializer,
    param_dtype: jnp.dtype,
    rngs: RngsArg | None,
    scale_metadata: Metadata = NO_METADATA,
    bias_metadata: Metadata = NO_METADATA,
) -> tuple[Param | None, Param | None]:
    """The optional `(num_features,)` scale and bias, drawn in that order from `params`.

    `rngs` may be None when both initializers are the constant `zeros`/`ones`.
    """

    def init(initializer: initializers.Initializer, metadata: Metadata) -> Param:
        if rngs is not None:
            key = params_key(rngs, layer)
        elif initializer is initializers.zeros or initializer is initializers.ones:
            key = jax.random.key(0)  # constant initializers ignore the key
        else:
            raise ValueError(
                f"{layer} got a random initializer but no `rngs`; pass `rngs=nnx.Rngs(...)`."
            )
        return Param(initializer(key, (num_features,), param_dtype), **metadata)

    scale = init(scale_init, scale_metadata) if use_scale else None
    bias = init(bias_init, bias_metadata) if use_bias else None
    return scale, bias


def check_features(
    x: jax.Array, feature_axes: tuple[int, ...], num_features: int, layer: str
) -> None:
    """Raise unless the feature axes of `x` hold `num_features` values."""
    size = 1
    for a in feature_axes:
        size *= x.shape[a]
    if size != num_features:
        raise ValueError(
            f"{layer} has `num_features`={num_features}, but the feature axes "
            f"{feature_axes} of the input (shape {tuple(x.shape)}) hold {size}."
        )


def _axes_attr(axes: Axes) -> int | tuple[int, ...]:
    return axes if isinstance(axes, int) else tuple(axes)


class _Normalization(Module):
    """The `scale`, `bias` and options LayerNorm, BatchNorm, GroupNorm and InstanceNorm
    share (set by `_set_options`), declared for the type checker."""

    scale: Param | None
    bias: Param | None
    num_features: int
    epsilon: float
    dtype: jnp.dtype | None
    param_dtype: jnp.dtype
    use_bias: bool
    use_scale: bool
    axis_name: str | None
    axis_index_groups: object
    use_fast_variance: bool
    promote_dtype: dtypes.PromoteDtypeFn


def _set_options(
    layer: _Normalization,
    name: str,
    num_features: int,
    *,
    epsilon: float,
    dtype: jnp.dtype | None,
    param_dtype: jnp.dtype,
    use_bias: bool,
    use_scale: bool,
    bias_init: initializers.Initializer,
    scale_init: initializers.Initializer,
    axis_name: str | None,
    axis_index_groups: object,
    use_fast_variance: bool,
    promote_dtype: dtypes.PromoteDtypeFn,
    rngs: RngsArg | None,
    bias_metadata: Metadata,
    scale_metadata: Metadata,
) -> None:
    """Give `layer` (a LayerNorm, BatchNorm, GroupNorm or InstanceNorm, named `name` in
    errors) its `scale` and `bias` Params and the options these layers share, as their
    arguments of those names."""
    layer.scale, layer.bias = scale_and_bias(
        name,
        num_features,
        use_scale=use_scale,
        use_bias=use_bias,
        scale_init=scale_init,
        bias_init=bias_init,
        param_dtype=param_dtype,
        rngs=rngs,
        scale_metadata=scale_metadata,
        bias_metadata=bias_metadata,
    )
    layer.num_features = num_features
    layer.epsilon = epsilon
    layer.dtype = dtype
    layer.param_dtype = param_dtype
    layer.use_bias = use_bias
    layer.use_scale = use_scale
    layer.axis_name = axis_name
    layer.axis_index_groups = axis_index_groups
    layer.use_fast_variance = use_fast_variance
    layer.promote_dtype = promote_dtype


class LayerNorm(_Normalization):
    """Normalise each example over its feature axes: `(x - mean) / sqrt(var + eps) * scale + bias`.

    Args:
        num_features: the number of features (the size of the feature axes).
        epsilon: added to the variance.
        dtype, param_dtype: computation and parameter dtypes.
        use_bias, use_scale: learn a bias / scale of shape `(num_features,)`.
        bias_init, scale_init: their initializers.
        reduction_axes: the axes statistics are taken over (default: the last).
        feature_axes: the axes `scale` and `bias` run along (default: the last).
        axis_name, axis_index_groups: average the statistics over a mapped axis.
        use_fast_variance: the one-pass variance `E[x²] - E[x]²`.
        promote_dtype: casts `(x, scale, bias)` to the computation dtype.
        rngs: the `Rngs` whose `params` stream initialises `scale` and `bias` (optional
            with the default constant initializers).
        bias_metadata, scale_metadata: metadata of the `bias` / `scale` Params.
    """

    def __init__(
        self,
        num_features: int,
        *,
        epsilon: float = 1e-6,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: initializers.Initializer = initializers.zeros,
        scale_init: initializers.Initializer = initializers.ones,
        reduction_axes: Axes = -1,
        feature_axes: Axes = -1,
        axis_name: str | None = None,
        axis_index_groups: object = None,
        use_fast_variance: bool = True,
        promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
        rngs: RngsArg | None = None,
        bias_metadata: Metadata = NO_METADATA,
        scale_metadata: Metadata = NO_METADATA,
    ) -> None:
        _set_options(
            self,
            "LayerNorm",
            num_features,
            epsilon=epsilon,
            dtype=dtype,
            param_dtype=param_dtype,
            use_bias=use_bias,
            use_scale=use_scale,
            bias_init=bias_init,
            scale_init=scale_init,
            axis_name=axis_name,
            axis_index_groups=axis_index_groups,
            use_fast_variance=use_fast_variance,
            promote_dtype=promote_dtype,
            rngs=rngs,
            bias_metadata=bias_metadata,
            scale_metadata=scale_metadata,
        )
        self.reduction_axes = _axes_attr(reduction_axes)
        self.feature_axes = _axes_attr(feature_axes)

    def __call__(self, x: jax.Array, *, mask: jax.Array | None = None) -> jax.Array:
        check_features(x, canonical_axes(x.ndim, self.feature_axes), self.num_features, "LayerNorm")
        x, scale, bias = self.promote_dtype((x, get(self.scale), get(self.bias)), dtype=self.dtype)
        mean, var = compute_stats(
            x,
            self.reduction_axes,
            self.dtype,
            self.axis_name,
            self.axis_index_groups,
            use_fast_variance=self.use_fast_variance,
            mask=mask,
        )
        return normalize(
            x,
            mean,
            var,
            scale,
            bias,
            self.reduction_axes,
            self.feature_axes,
            self.dtype,
            self.epsilon,
        )


class RMSNorm(Module):
    """Scale each example by the root mean square of its features.

    `y = x / sqrt(mean(x²) + eps) * scale`, the mean taken over `reduction_axes`.

    Arguments as `LayerNorm`, without a bias.
    """

    def __init__(
        self,
        num_features: int,
        *,
        epsilon: float = 1e-6,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        use_scale: bool = True,
        scale_init: initializers.Initializer = initializers.ones,
        reduction_axes: Axes = -1,
        feature_axes: Axes = -1,
        axis_name: str | None = None,
        axis_index_groups: object = None,
        use_fast_variance: bool = True,
        promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
        rngs: RngsArg | None = None,
        scale_metadata: Metadata = NO_METADATA,
    ) -> None:
        self.scale, _ = scale_and_bias(
            "RMSNorm",
            num_features,
            use_scale=use_scale,
            use_bias=False,
            scale_init=scale_init,
            bias_init=initializers.zeros,
            param_dtype=param_dtype,
            rngs=rngs,
            scale_metadata=scale_metadata,
        )
        self.num_features = num_features
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.use_scale = use_scale
        self.reduction_axes = _axes_attr(reduction_axes)
        self.feature_axes = _axes_attr(feature_axes)
        self.axis_name = axis_name
        self.axis_index_groups = axis_index_groups
        self.use_fast_variance = use_fast_variance
        self.promote_dtype = promote_dtype

    def __call__(self, x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        check_features(x, canonical_axes(x.ndim, self.feature_axes), self.num_features, "RMSNorm")
        x, scale = self.promote_dtype((x, get(self.scale)), dtype=self.dtype)
        mean, var = compute_stats(
            x,
            self.reduction_axes,
            self.dtype,
            self.axis_name,
            self.axis_index_groups,
            use_mean=False,
            use_fast_variance=self.use_fast_variance,
            mask=mask,
        )
        return normalize(
            x,
            mean,
            var,
            scale,
            None,
            self.reduction_axes,
            self.feature_axes,
            self.dtype,
            self.epsilon,
        )


class BatchNorm(_Normalization):
    """Normalise over the batch (every axis but `axis`), keeping running statistics.

    Training (`use_running_average=False`): normalise with the batch's mean and variance
    and update `mean`/`var` in place: `stat = momentum * stat + (1 - momentum) * batch`.
    Evaluation (`use_running_average=True`, `model.eval()`): normalise with `mean`/`var`.
    The running statistics are `float32` `BatchStat`s.

    Args:
        num_features: the size of the feature axis.
        use_running_average: the default mode (overridable per call; None: every call
            must say).
        axis: the feature axis.
        momentum: the decay of the running statistics.
        epsilon: added to the variance.
        promote_dtype: casts `(x, mean, var, scale, bias)` to the computation dtype.

    `dtype`, `param_dtype`, `use_bias`, `use_scale`, `bias_init`, `scale_init`, `axis_name`,
    `axis_index_groups`, `use_fast_variance`, `rngs`, `bias_metadata`, `scale_metadata`: as
    `LayerNorm`.
    """

    def __init__(
        self,
        num_features: int,
        *,
        use_running_average: bool | None = False,
        axis: int = -1,
        momentum: float = 0.99,
        epsilon: float = 1e-5,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: initializers.Initializer = initializers.zeros,
        scale_init: initializers.Initializer = initializers.ones,
        axis_name: str | None = None,
        axis_index_groups: object = None,
        use_fast_variance: bool = True,
        promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
        rngs: RngsArg | None = None,
        bias_metadata: Metadata = NO_METADATA,
        scale_metadata: Metadata = NO_METADATA,
    ) -> None:
        self.mean = BatchStat(jnp.zeros((num_features,), jnp.float32))
        self.var = BatchStat(jnp.ones((num_features,), jnp.float32))
        _set_options(
            self,
            "BatchNorm",
            num_features,
            epsilon=epsilon,
            dtype=dtype,
            param_dtype=param_dtype,
            use_bias=use_bias,
            use_scale=use_scale,
            bias_init=bias_init,
            scale_init=scale_init,
            axis_name=axis_name,
            axis_index_groups=axis_index_groups,
            use_fast_variance=use_fast_variance,
            promote_dtype=promote_dtype,
            rngs=rngs,
            bias_metadata=bias_metadata,
            scale_metadata=scale_metadata,
        )
        self.use_running_average = use_running_average
        self.axis = axis
        self.momentum = momentum

    def set_view(self, use_running_average: bool | None = None) -> None:
        """Used by `nnx.view`.

        Args:
            use_running_average: if True, normalise with the stored batch statistics.
        """
        if use_running_average is not None:
            self.use_running_average = use_running_average

    def __call__(
        self,
        x: jax.Array,
        use_running_average: bool | None = None,
        *,
        mask: jax.Array | None = None,
    ) -> jax.Array:
        use_running_average = first_given(
            use_running_average,
            self.use_running_average,
            layer="BatchNorm",
            name="use_running_average",
        )
        feature_axes = canonical_axes(x.ndim, self.axis)
        check_features(x, feature_axes, self.num_features, "BatchNorm")
        reduction_axes = tuple(a for a in range(x.ndim) if a not in feature_axes)
        x, mean, var, scale, bias = self.promote_dtype(
            (x, self.mean[...], self.var[...], get(self.scale), get(self.bias)),
            dtype=self.dtype,
        )
        if not use_running_average:
            mean, var = compute_stats(
                x,
                reduction_axes,
                self.dtype,
                self.axis_name,
                self.axis_index_groups,
                use_fast_variance=self.use_fast_variance,
                mask=mask,
            )
            m = self.momentum
            # No gradient flows into the running statistics, as in Flax (which stops it
            # whenever the Variables can be written, hijax ones included).
            self.mean[...] = jax.lax.stop_gradient(m * self.mean[...] + (1 - m) * mean)
            self.var[...] = jax.lax.stop_gradient(m * self.var[...] + (1 - m) * var)
        return normalize(
            x, mean, var, scale, bias, reduction_axes, feature_axes, self.dtype, self.epsilon
        )


class GroupNorm(_Normalization):
    """Normalise each example over groups of channels (and its other non-batch axes).

    The last axis holds `num_features` channels, split into `num_groups` groups of
    `group_size`; give one of the two (`num_groups=None` to give `group_size`). With one
    group this is LayerNorm over all non-batch axes.

    Args:
        num_features: the number of channels.
        num_groups: the number of groups (default 32, the paper's).
        group_size: the number of channels per group, instead of `num_groups`.
        reduction_axes: the axes statistics are taken over, which must end with the last
            (default: every axis but the first, the batch).

    `epsilon`, `dtype`, `param_dtype`, `use_bias`, `use_scale`, `bias_init`, `scale_init`,
    `axis_name`, `axis_index_groups`, `use_fast_variance`, `promote_dtype`, `rngs`, `bias_metadata`,
    `scale_metadata`: as `LayerNorm`.
    """

    def __init__(
        self,
        num_features: int,
        num_groups: int | None = 32,
        group_size: int | None = None,
        *,
        epsilon: float = 1e-6,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: initializers.Initializer = initializers.zeros,
        scale_init: initializers.Initializer = initializers.ones,
        reduction_axes: Axes | None = None,
        axis_name: str | None = None,
        axis_index_groups: object = None,
        use_fast_variance: bool = True,
        promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
        rngs: RngsArg | None = None,
        bias_metadata: Metadata = NO_METADATA,
        scale_metadata: Metadata = NO_METADATA,
    ) -> None:
        self.num_groups, self.group_size = _groups(num_features, num_groups, group_size)
        _set_options(
            self,
            "GroupNorm",
            num_features,
            epsilon=epsilon,
            dtype=dtype,
            param_dtype=param_dtype,
            use_bias=use_bias,
            use_scale=use_scale,
            bias_init=bias_init,
            scale_init=scale_init,
            axis_name=axis_name,
            axis_index_groups=axis_index_groups,
            use_fast_variance=use_fast_variance,
            promote_dtype=promote_dtype,
            rngs=rngs,
            bias_metadata=bias_metadata,
            scale_metadata=scale_metadata,
        )
        self.feature_axis = -1
        self.reduction_axes = None if reduction_axes is None else _axes_attr(reduction_axes)

    def __call__(self, x: jax.Array, *, mask: jax.Array | None = None) -> jax.Array:
        check_features(x, (x.ndim - 1,), self.num_features, "GroupNorm")
        axes = self.reduction_axes
        if axes is None:
            axes = (*range(1, x.ndim - 1), -1)
        reduction_axes = canonical_axes(x.ndim, axes)
        if reduction_axes[-1] != x.ndim - 1:
            raise ValueError(
                f"GroupNorm: `reduction_axes` {self.reduction_axes} must include the last "
                "axis (the channels)."
            )
        grouped = (*x.shape[:-1], self.num_groups, self.group_size)
        if mask is not None:
            mask = mask.reshape(*mask.shape[:-1], self.num_groups, self.group_size)
        x, scale, bias = self.promote_dtype((x, get(self.scale), get(self.bias)), dtype=self.dtype)
        mean, var = compute_stats(
            x.reshape(grouped),
            (*reduction_axes[:-1], -1),
            self.dtype,
            self.axis_name,
            self.axis_index_groups,
            use_fast_variance=self.use_fast_variance,
            mask=mask,
        )
        mean = jnp.repeat(mean, self.group_size, axis=1)
        var = jnp.repeat(var, self.group_size, axis=1)
        return normalize(
            x,
            mean,
            var,
            scale,
            bias,
            reduction_axes[:-1],
            (self.feature_axis,),
            self.dtype,
            self.epsilon,
        )


def _groups(num_features: int, num_groups: int | None, group_size: int | None) -> tuple[int, int]:
    """`(num_groups, group_size)` from the one of them that is given."""
    if (num_groups is None) == (group_size is None):
        raise ValueError(
            "GroupNorm: give exactly one of `num_groups` and `group_size` (to give "
            "`group_size`, pass `num_groups=None`: its default is 32)."
        )
    if group_size is not None:
        if group_size <= 0 or num_features % group_size:
            raise ValueError(
                f"GroupNorm: `group_size`={group_size} must divide `num_features`={num_features}."
            )
        return num_features // group_size, group_size
    if not isinstance(num_groups, int) or num_groups <= 0 or num_features % num_groups:
        raise ValueError(
            f"GroupNorm: `num_groups`={num_groups} must be a positive int dividing "
            f"`num_features`={num_features}."
        )
    return num_groups, num_features // num_groups


class InstanceNorm(_Normalization):
    """Normalise each example and channel over the remaining axes (e.g. an image's pixels).

    The first axis is the batch; `feature_axes` (default the last) hold the channels,
    which get their own statistics, `scale` and `bias`; every other axis is reduced.

    Args:
        num_features: the number of channels.
        feature_axes: the channel axes (never the first).

    `epsilon`, `dtype`, `param_dtype`, `use_bias`, `use_scale`, `bias_init`, `scale_init`,
    `axis_name`, `axis_index_groups`, `use_fast_variance`, `promote_dtype`, `rngs`, `bias_metadata`,
    `scale_metadata`: as `LayerNorm`.
    """

    def __init__(
        self,
        num_features: int,
        *,
        epsilon: float = 1e-6,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: initializers.Initializer = initializers.zeros,
        scale_init: initializers.Initializer = initializers.ones,
        feature_axes: Axes = -1,
        axis_name: str | None = None,
        axis_index_groups: object = None,
        use_fast_variance: bool = True,
        promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
        rngs: RngsArg | None = None,
        bias_metadata: Metadata = NO_METADATA,
        scale_metadata: Metadata = NO_METADATA,
    ) -> None:
        _set_options(
            self,
            "InstanceNorm",
            num_features,
            epsilon=epsilon,
            dtype=dtype,
            param_dtype=param_dtype,
            use_bias=use_bias,
            use_scale=use_scale,
            bias_init=bias_init,
            scale_init=scale_init,
            axis_name=axis_name,
            axis_index_groups=axis_index_groups,
            use_fast_variance=use_fast_variance,
            promote_dtype=promote_dtype,
            rngs=rngs,
            bias_metadata=bias_metadata,
            scale_metadata=scale_metadata,
        )
        self.feature_axes = _axes_attr(feature_axes)

    def __call__(self, x: jax.Array, *, mask: jax.Array | None = None) -> jax.Array:
        feature_axes = canonical_axes(x.ndim, self.feature_axes)
        if 0 in feature_axes:
            raise ValueError(
                f"InstanceNorm: `feature_axes` {self.feature_axes} may not include the first "
                "axis, the batch."
            )
        check_features(x, feature_axes, self.num_features, "InstanceNorm")
        reduction_axes = tuple(a for a in range(1, x.ndim) if a not in feature_axes)
        x, scale, bias = self.promote_dtype((x, get(self.scale), get(self.bias)), dtype=self.dtype)
        mean, var = compute_stats(
            x,
            reduction_axes,
            self.dtype,
            self.axis_name,
            self.axis_index_groups,
            use_fast_variance=self.use_fast_variance,
            mask=mask,
        )
        return normalize(
            x, mean, var, scale, bias, reduction_axes, feature_axes, self.dtype, self.epsilon
        )
