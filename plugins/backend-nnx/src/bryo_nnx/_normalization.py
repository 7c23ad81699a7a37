"""Normalization layers: `LayerNorm`, `RMSNorm` and `BatchNorm`.

Each normalises its inputs over some axes and applies a learned per-feature `scale` and
`bias` (`Param`s). `BatchNorm` also keeps running `mean` and `var` as `BatchStat`s,
updated in place while training and used instead of batch statistics when
`use_running_average` is True (`model.eval()` sets it).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax import lax

from bryo_graph import BatchStat, Param

from . import initializers
from ._common import RngsArg, canonical_axes, first_not_none, params_key, promote_dtype
from ._module import Module


def _scale_and_bias(
    num_features: int,
    use_scale: bool,
    use_bias: bool,
    scale_init: initializers.Initializer,
    bias_init: initializers.Initializer,
    param_dtype: jnp.dtype,
    rngs: RngsArg | None,
    layer: str,
) -> tuple[Param | None, Param | None]:
    def init(initializer: initializers.Initializer) -> Param:
        if rngs is not None:
            key = params_key(rngs, layer)
        elif initializer is initializers.zeros or initializer is initializers.ones:
            key = jax.random.key(0)  # constant initializers ignore the key
        else:
            raise ValueError(
                f"{layer} got a random initializer but no `rngs`; pass `rngs=nnx.Rngs(...)`."
            )
        return Param(initializer(key, (num_features,), param_dtype))

    return (init(scale_init) if use_scale else None, init(bias_init) if use_bias else None)


def _feature_shape(x: jax.Array, feature_axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(x.shape[a] if a in feature_axes else 1 for a in range(x.ndim))


def _normalize(
    x: jax.Array,
    mean: jax.Array | None,
    var: jax.Array,
    scale: Param | None,
    bias: Param | None,
    feature_axes: tuple[int, ...],
    epsilon: float,
    dtype: jnp.dtype | None,
) -> jax.Array:
    shape = _feature_shape(x, feature_axes)
    y = x if mean is None else x - mean
    y = y * lax.rsqrt(var + epsilon)
    if scale is not None:
        y = y * scale.value.reshape(shape)
    if bias is not None:
        y = y + bias.value.reshape(shape)
    return jnp.asarray(y, dtype or y.dtype)


def _check_features(
    x: jax.Array, feature_axes: tuple[int, ...], num_features: int, layer: str
) -> None:
    size = 1
    for a in feature_axes:
        size *= x.shape[a]
    if size != num_features:
        raise ValueError(
            f"{layer} has `num_features`={num_features}, but the feature axes "
            f"{feature_axes} of the input (shape {tuple(x.shape)}) hold {size}."
        )


class LayerNorm(Module):
    """Normalise each example over its feature axes: `(x - mean) / sqrt(var + eps) * scale + bias`.

    Args:
        num_features: the size of the feature axis.
        epsilon: added to the variance.
        dtype, param_dtype: computation and parameter dtypes.
        use_bias, use_scale: learn a bias / scale of shape `(num_features,)`.
        bias_init, scale_init: their initializers.
        reduction_axes: the axes statistics are taken over (default: the last).
        feature_axes: the axis `scale` and `bias` run along (default: the last).
        rngs: the `Rngs` whose `params` stream initialises `scale` and `bias` (optional
            with the default constant initializers).
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
        reduction_axes: int | Sequence[int] = -1,
        feature_axes: int | Sequence[int] = -1,
        rngs: RngsArg | None = None,
    ) -> None:
        self.scale, self.bias = _scale_and_bias(
            num_features, use_scale, use_bias, scale_init, bias_init, param_dtype, rngs, "LayerNorm"
        )
        self.num_features = num_features
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.use_bias = use_bias
        self.use_scale = use_scale
        self.reduction_axes = (
            reduction_axes if isinstance(reduction_axes, int) else tuple(reduction_axes)
        )
        self.feature_axes = feature_axes if isinstance(feature_axes, int) else tuple(feature_axes)

    def __call__(self, x: jax.Array) -> jax.Array:
        features = canonical_axes(self.feature_axes, x.ndim)
        _check_features(x, features, self.num_features, "LayerNorm")
        (x,) = promote_dtype(self.dtype, x)
        axes = canonical_axes(self.reduction_axes, x.ndim)
        mean = jnp.mean(x, axis=axes, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
        return _normalize(x, mean, var, self.scale, self.bias, features, self.epsilon, self.dtype)


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
        reduction_axes: int | Sequence[int] = -1,
        feature_axes: int | Sequence[int] = -1,
        rngs: RngsArg | None = None,
    ) -> None:
        self.scale, _ = _scale_and_bias(
            num_features,
            use_scale,
            False,
            scale_init,
            initializers.zeros,
            param_dtype,
            rngs,
            "RMSNorm",
        )
        self.num_features = num_features
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.use_scale = use_scale
        self.reduction_axes = (
            reduction_axes if isinstance(reduction_axes, int) else tuple(reduction_axes)
        )
        self.feature_axes = feature_axes if isinstance(feature_axes, int) else tuple(feature_axes)

    def __call__(self, x: jax.Array) -> jax.Array:
        features = canonical_axes(self.feature_axes, x.ndim)
        _check_features(x, features, self.num_features, "RMSNorm")
        (x,) = promote_dtype(self.dtype, x)
        axes = canonical_axes(self.reduction_axes, x.ndim)
        mean_square = jnp.mean(jnp.square(x), axis=axes, keepdims=True)
        return _normalize(
            x, None, mean_square, self.scale, None, features, self.epsilon, self.dtype
        )


class BatchNorm(Module):
    """Normalise over the batch (every axis but `axis`), keeping running statistics.

    Training (`use_running_average=False`): normalise with the batch's mean and variance
    and update `mean`/`var` in place: `stat = momentum * stat + (1 - momentum) * batch`.
    Evaluation (`use_running_average=True`, `model.eval()`): normalise with `mean`/`var`.

    Args:
        num_features: the size of the feature axis.
        use_running_average: the default mode (overridable per call).
        axis: the feature axis.
        momentum: the decay of the running statistics.
        epsilon: added to the variance.
        dtype, param_dtype, use_bias, use_scale, bias_init, scale_init: as `LayerNorm`.
        axis_name: a mapped axis name (`vmap`/`pmap`) to average the statistics over.
        rngs: the `Rngs` whose `params` stream initialises `scale` and `bias` (optional
            with the default constant initializers).
    """

    def __init__(
        self,
        num_features: int,
        *,
        use_running_average: bool = False,
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
        rngs: RngsArg | None = None,
    ) -> None:
        self.scale, self.bias = _scale_and_bias(
            num_features, use_scale, use_bias, scale_init, bias_init, param_dtype, rngs, "BatchNorm"
        )
        self.mean = BatchStat(jnp.zeros((num_features,), param_dtype))
        self.var = BatchStat(jnp.ones((num_features,), param_dtype))
        self.num_features = num_features
        self.use_running_average = use_running_average
        self.axis = axis
        self.momentum = momentum
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.use_bias = use_bias
        self.use_scale = use_scale
        self.axis_name = axis_name

    def __call__(self, x: jax.Array, use_running_average: bool | None = None) -> jax.Array:
        features = canonical_axes(self.axis, x.ndim)
        _check_features(x, features, self.num_features, "BatchNorm")
        (x,) = promote_dtype(self.dtype, x)
        shape = _feature_shape(x, features)
        if first_not_none(use_running_average, self.use_running_average):
            mean = self.mean.value.reshape(shape)
            var = self.var.value.reshape(shape)
        else:
            axes = tuple(a for a in range(x.ndim) if a not in features)
            mean = jnp.mean(x, axis=axes, keepdims=True)
            mean_square = jnp.mean(jnp.square(x), axis=axes, keepdims=True)
            if self.axis_name is not None:
                mean, mean_square = lax.pmean((mean, mean_square), self.axis_name)
            var = jnp.maximum(mean_square - jnp.square(mean), 0.0)
            m = self.momentum
            self.mean.value = m * self.mean.value + (1 - m) * mean.reshape(-1).astype(
                self.param_dtype
            )
            self.var.value = m * self.var.value + (1 - m) * var.reshape(-1).astype(self.param_dtype)
        return _normalize(x, mean, var, self.scale, self.bias, features, self.epsilon, self.dtype)
