"""Parameter initializers: `jax.nn.initializers` under Flax's names, plus `zeros_init`/`ones_init`.

An initializer is `init(key, shape, dtype) -> array`. Layers draw `key` from the `params`
stream of the `Rngs` they are built with.
"""

from jax.nn.initializers import Initializer as Initializer
from jax.nn.initializers import constant as constant
from jax.nn.initializers import delta_orthogonal as delta_orthogonal
from jax.nn.initializers import glorot_normal as glorot_normal
from jax.nn.initializers import glorot_uniform as glorot_uniform
from jax.nn.initializers import he_normal as he_normal
from jax.nn.initializers import he_uniform as he_uniform
from jax.nn.initializers import kaiming_normal as kaiming_normal
from jax.nn.initializers import kaiming_uniform as kaiming_uniform
from jax.nn.initializers import lecun_normal as lecun_normal
from jax.nn.initializers import lecun_uniform as lecun_uniform
from jax.nn.initializers import normal as normal
from jax.nn.initializers import ones as ones
from jax.nn.initializers import orthogonal as orthogonal
from jax.nn.initializers import truncated_normal as truncated_normal
from jax.nn.initializers import uniform as uniform
from jax.nn.initializers import variance_scaling as variance_scaling
from jax.nn.initializers import xavier_normal as xavier_normal
from jax.nn.initializers import xavier_uniform as xavier_uniform
from jax.nn.initializers import zeros as zeros


def zeros_init() -> Initializer:
    """An initializer giving zeros (Flax's spelling of `zeros`)."""
    return zeros


def ones_init() -> Initializer:
    """An initializer giving ones (Flax's spelling of `ones`)."""
    return ones


# The layers' defaults, under the names of the Flax NNX modules that define them
# (`nnx.nn.linear.default_kernel_init`, ...): the layers use these very objects.
default_kernel_init: Initializer = lecun_normal()
"""`Linear`, `Conv`, `Einsum`, attention and recurrent kernels: LeCun normal."""
default_bias_init: Initializer = zeros_init()
"""Biases: zeros."""
default_embed_init: Initializer = variance_scaling(1.0, "fan_in", "normal", out_axis=0)
"""`Embed`'s table: variance scaling over the features (fan-in, out axis 0)."""
default_a_initializer: Initializer = he_uniform()
"""`LoRA`'s `lora_a`: He uniform."""
default_b_initializer: Initializer = zeros
"""`LoRA`'s `lora_b`: zeros, so an adapter starts as the identity."""
