"""Activation functions: `jax.nn`'s own function objects, so their custom JVP rules are kept;
and `PReLU`, the activation with a learned slope."""

import jax
import jax.numpy as jnp
from jax.nn import celu as celu
from jax.nn import elu as elu
from jax.nn import gelu as gelu
from jax.nn import glu as glu
from jax.nn import hard_sigmoid as hard_sigmoid
from jax.nn import hard_silu as hard_silu
from jax.nn import hard_swish as hard_swish
from jax.nn import hard_tanh as hard_tanh
from jax.nn import identity as identity
from jax.nn import leaky_relu as leaky_relu
from jax.nn import log_sigmoid as log_sigmoid
from jax.nn import log_softmax as log_softmax
from jax.nn import logsumexp as logsumexp
from jax.nn import mish as mish
from jax.nn import one_hot as one_hot
from jax.nn import relu as relu
from jax.nn import relu6 as relu6
from jax.nn import selu as selu
from jax.nn import sigmoid as sigmoid
from jax.nn import silu as silu
from jax.nn import soft_sign as soft_sign
from jax.nn import softmax as softmax
from jax.nn import softplus as softplus
from jax.nn import standardize as standardize
from jax.nn import swish as swish
from jax.nn import tanh as tanh

from bryo_graph import Param

from . import dtypes
from ._common import NO_METADATA, Metadata
from ._module import Module


class PReLU(Module):
    """Parametric ReLU: `x` where `x >= 0`, else `negative_slope * x`, the slope learned.

    Args:
        negative_slope_init: the slope's initial value (a scalar `Param`).
        dtype: computation dtype (default: the input's; the slope is cast to it).
        param_dtype: the slope's dtype.
        promote_dtype: casts `(inputs, negative_slope)` when `dtype` is given.
        negative_slope_metadata: metadata of the `negative_slope` Param.
    """

    def __init__(
        self,
        negative_slope_init: float = 0.01,
        *,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
        negative_slope_metadata: Metadata = NO_METADATA,
    ) -> None:
        self.negative_slope = Param(
            jnp.asarray(negative_slope_init, dtype=param_dtype), **negative_slope_metadata
        )
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.promote_dtype = promote_dtype

    def __call__(self, inputs: jax.Array) -> jax.Array:
        slope = self.negative_slope[...]
        if self.dtype is not None:
            inputs, slope = self.promote_dtype((inputs, slope), dtype=self.dtype)
        else:
            slope = jnp.asarray(slope, inputs.dtype)
        return jnp.where(inputs >= 0, inputs, slope * inputs)
