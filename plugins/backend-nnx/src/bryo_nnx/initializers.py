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
