"""`nnx.nn.initializers` (also `nnx.initializers`): parameter initializers."""

from bryo_nnx.initializers import Initializer as Initializer
from bryo_nnx.initializers import constant as constant
from bryo_nnx.initializers import delta_orthogonal as delta_orthogonal
from bryo_nnx.initializers import glorot_normal as glorot_normal
from bryo_nnx.initializers import glorot_uniform as glorot_uniform
from bryo_nnx.initializers import he_normal as he_normal
from bryo_nnx.initializers import he_uniform as he_uniform
from bryo_nnx.initializers import kaiming_normal as kaiming_normal
from bryo_nnx.initializers import kaiming_uniform as kaiming_uniform
from bryo_nnx.initializers import lecun_normal as lecun_normal
from bryo_nnx.initializers import lecun_uniform as lecun_uniform
from bryo_nnx.initializers import normal as normal
from bryo_nnx.initializers import ones as ones
from bryo_nnx.initializers import ones_init as ones_init
from bryo_nnx.initializers import orthogonal as orthogonal
from bryo_nnx.initializers import truncated_normal as truncated_normal
from bryo_nnx.initializers import uniform as uniform
from bryo_nnx.initializers import variance_scaling as variance_scaling
from bryo_nnx.initializers import xavier_normal as xavier_normal
from bryo_nnx.initializers import xavier_uniform as xavier_uniform
from bryo_nnx.initializers import zeros as zeros
from bryo_nnx.initializers import zeros_init as zeros_init
