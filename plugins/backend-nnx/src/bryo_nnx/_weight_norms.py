"""Wrappers that re-normalise another layer's weights before each of its calls:
`WeightNorm` (each weight scaled to a learned norm) and `SpectralNorm` (each matrix
divided by its largest singular value, found by power iteration).

Both rewrite the wrapped layer's `Param`s in place on every call, as Flax does: the
wrapped layer, called directly afterwards, uses the normalised weights. Their own state
is keyed by the weight's path in the wrapped layer: `WeightNorm.scales[('kernel',)]`,
`SpectralNorm.batch_stats[('kernel', 'u')]`.
"""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp
from jax import lax

from bryo_filters import Filter, PathContains, to_predicate
from bryo_graph import BatchStat, Dict, Param, iter_graph
from bryo_pytree import Path

from . import dtypes, initializers
from ._common import RngsArg, first_given, params_key
from ._module import Module
from ._normalization import Axes, canonical_axes

KERNELS = PathContains("kernel")
"""WeightNorm's default `variable_filter`: weights whose path contains 'kernel'."""


def params_with_paths(layer: Module) -> Iterator[tuple[Path, Param]]:
    """The live `Param`s of `layer`'s graph, each with its path."""
    for path, value in iter_graph(layer):
        if isinstance(value, Param):
            yield path, value


def l2_normalize(x: jax.Array, axis: Axes | None = None, eps: float = 1e-12) -> jax.Array:
    """`x / sqrt(sum(x²) + eps)` over `axis` (every axis for None)."""
    return x * lax.rsqrt((x * x).sum(axis=axis, keepdims=True) + eps)


class WeightNorm(Module):
    """Reparametrise a layer's weights as `scale * w / ||w||` (arXiv:1602.07868).

    Before each call every weight the filter selects (default: paths containing
    'kernel') is L2-normalised over all axes but `feature_axes` and multiplied by its
    learned `scale` (one per feature), in place.

    >>> layer = WeightNorm(Linear(8, 4, rngs=rngs), rngs=rngs)   # doctest: +SKIP

    Args:
        layer_instance: the layer to wrap.
        feature_axes: the axes that keep their own norm and scale (None: one norm).
        use_scale: learn the scales (`Param`s in `scales`, keyed by weight path).
        scale_init: their initializer (called with a key from the `params` stream).
        epsilon: added under the square root.
        dtype: the weights' dtype after normalisation (default: promoted).
        param_dtype: kept for Flax compatibility (the scales are `float32` as in Flax).
        variable_filter: which weights to normalise.
        promote_dtype: kept for Flax compatibility.
        rngs: the `Rngs` whose `params` stream initialises the scales.

    Flax keeps the scales as plain arrays and passes the `params` stream itself to
    `scale_init` (so only constant initializers work there); here they are `Param`s, which
    `wrt=nnx.Param` trains, and `scale_init` gets a key, drawn per scale.
    """

    def __init__(
        self,
        layer_instance: Module,
        *,
        feature_axes: Axes | None = -1,
        use_scale: bool = True,
        scale_init: initializers.Initializer = initializers.ones,
        epsilon: float = 1e-12,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        variable_filter: Filter = KERNELS,
        promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
        rngs: RngsArg,
    ) -> None:
        self.layer_instance = layer_instance
        self.feature_axes = () if feature_axes is None else feature_axes
        self.use_scale = use_scale
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.variable_filter = to_predicate(variable_filter)
        self.promote_dtype = promote_dtype
        self.scales: Dict | None = None
        if use_scale:
            self.scales = Dict(
                {
                    path: Param(
                        scale_init(params_key(rngs, "WeightNorm"), self._feature_shape(param))
                    )
                    for path, param in self._selected()
                }
            )

    def _selected(self) -> list[tuple[Path, Param]]:
        return [
            (p, v) for p, v in params_with_paths(self.layer_instance) if self.variable_filter(p, v)
        ]

    def _feature_shape(self, param: Param) -> tuple[int, ...]:
        return tuple(param.shape[a] for a in canonical_axes(param.ndim, self.feature_axes))

    def __call__(self, x: jax.Array, *args: object, **kwargs: object) -> jax.Array:
        """Normalise the selected weights, then call the wrapped layer with the arguments."""
        for path, param in self._selected():
            self._normalize(path, param)
        return self.layer_instance(x, *args, **kwargs)

    def _normalize(self, path: Path, param: Param) -> None:
        value = param[...]
        feature_axes = canonical_axes(value.ndim, self.feature_axes)
        reduction = tuple(a for a in range(value.ndim) if a not in feature_axes)
        normalized = l2_normalize(value, axis=reduction, eps=self.epsilon)
        present = [value]
        if self.use_scale:
            scale = self._scale(path)
            if len(feature_axes) < value.ndim:
                shape = tuple(n if a in feature_axes else 1 for a, n in enumerate(value.shape))
                scale = scale.reshape(shape)
            normalized = normalized * scale
            present.append(scale)
        param[...] = jnp.asarray(normalized, dtypes.canonicalize_dtype(*present, dtype=self.dtype))

    def _scale(self, path: Path) -> jax.Array:
        if self.scales is None or path not in self.scales:
            raise RuntimeError(
                f"WeightNorm has no scale for the weight at {'/'.join(map(str, path))}: the "
                "wrapped layer gained weights after the WeightNorm was built; build it again."
            )
        return self.scales[path][...]


class SpectralNorm(Module):
    """Divide each of a layer's weight matrices by its largest singular value.

    The singular value comes from `n_steps` of power iteration per call, started from
    the vector `u` kept per weight (a `BatchStat` in `batch_stats`, with the last
    estimate `sigma`); while `update_stats` (training, `model.train()`), both are updated.
    Weights of more than two axes are flattened to `(-1, last)`; vectors and scalars are
    left alone.

    Args:
        layer_instance: the layer to wrap.
        n_steps: power-iteration steps per call (0: no normalisation).
        epsilon: added in the L2 normalisations.
        dtype: the weights' dtype after normalisation (default: promoted).
        param_dtype: the dtype of `u` and `sigma`.
        error_on_non_matrix: raise for weights of more than two axes instead.
        update_stats: the default for calls (`model.eval()` makes it False).
        rngs: the `Rngs` whose `params` stream draws the initial `u`s.
    """

    def __init__(
        self,
        layer_instance: Module,
        *,
        n_steps: int = 1,
        epsilon: float = 1e-12,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        error_on_non_matrix: bool = False,
        update_stats: bool = True,
        rngs: RngsArg,
    ) -> None:
        self.layer_instance = layer_instance
        self.n_steps = n_steps
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.error_on_non_matrix = error_on_non_matrix
        self.use_running_average = not update_stats  # so train() / eval() switch it
        batch_stats: dict[Path, BatchStat] = {}
        for path, param in params_with_paths(layer_instance):
            matrix = self._as_matrix(path, param[...])
            if matrix is None:
                continue
            key = params_key(rngs, "SpectralNorm")
            u = initializers.normal()(key, (1, matrix.shape[-1]), param_dtype)
            batch_stats[(*path, "u")] = BatchStat(u)
            batch_stats[(*path, "sigma")] = BatchStat(initializers.ones(key, (), param_dtype))
        self.batch_stats = Dict(batch_stats)

    def _as_matrix(self, path: Path, value: jax.Array) -> jax.Array | None:
        """`value` as a matrix, or None when it is not normalised."""
        if value.ndim <= 1 or self.n_steps < 1:
            return None
        if value.ndim > 2:
            if self.error_on_non_matrix:
                raise ValueError(
                    f"SpectralNorm: the weight at {'/'.join(map(str, path))} has {value.ndim} "
                    "axes and `error_on_non_matrix` is True."
                )
            value = value.reshape(-1, value.shape[-1])
        return value

    def __call__(self, x: jax.Array, update_stats: bool | None = None) -> jax.Array:
        """Normalise the weights (updating `u` and `sigma` if `update_stats`), then call
        the wrapped layer on `x`."""
        update = first_given(
            update_stats, not self.use_running_average, layer="SpectralNorm", name="update_stats"
        )
        for path, param in list(params_with_paths(self.layer_instance)):
            self._normalize(path, param, bool(update))
        return self.layer_instance(x)

    def _normalize(self, path: Path, param: Param, update_stats: bool) -> None:
        matrix = self._as_matrix(path, param[...])
        if matrix is None:
            return
        u_stat, sigma_stat = self._stats(path)
        u = u_stat[...]
        for _ in range(self.n_steps):
            v = l2_normalize(jnp.matmul(u, matrix.T), eps=self.epsilon)
            u = l2_normalize(jnp.matmul(v, matrix), eps=self.epsilon)
        u, v = lax.stop_gradient(u), lax.stop_gradient(v)
        sigma = jnp.matmul(jnp.matmul(v, matrix), u.T)[0, 0]
        normalized = (matrix / jnp.where(sigma != 0, sigma, 1)).reshape(param.shape)
        if update_stats:
            u_stat[...] = u
            sigma_stat[...] = sigma
        dtype = dtypes.canonicalize_dtype(normalized, u, v, sigma, dtype=self.dtype)
        param[...] = jnp.asarray(normalized, dtype)

    def _stats(self, path: Path) -> tuple[BatchStat, BatchStat]:
        try:
            return self.batch_stats[(*path, "u")], self.batch_stats[(*path, "sigma")]
        except KeyError:
            raise RuntimeError(
                f"SpectralNorm has no `u`/`sigma` for the weight at {'/'.join(map(str, path))}: "
                "the wrapped layer gained weights after the SpectralNorm was built; build it "
                "again."
            ) from None
