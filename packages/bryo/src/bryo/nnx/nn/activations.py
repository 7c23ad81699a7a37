"""`nnx.nn.activations`: activation functions and `PReLU`."""

from bryo_nnx import PReLU as PReLU
from bryo_nnx import celu as celu
from bryo_nnx import elu as elu
from bryo_nnx import gelu as gelu
from bryo_nnx import glu as glu
from bryo_nnx import hard_sigmoid as hard_sigmoid
from bryo_nnx import hard_silu as hard_silu
from bryo_nnx import hard_swish as hard_swish
from bryo_nnx import hard_tanh as hard_tanh
from bryo_nnx import identity as identity
from bryo_nnx import leaky_relu as leaky_relu
from bryo_nnx import log_sigmoid as log_sigmoid
from bryo_nnx import log_softmax as log_softmax
from bryo_nnx import logsumexp as logsumexp
from bryo_nnx import one_hot as one_hot
from bryo_nnx import relu as relu
from bryo_nnx import relu6 as relu6
from bryo_nnx import selu as selu
from bryo_nnx import sigmoid as sigmoid
from bryo_nnx import silu as silu
from bryo_nnx import soft_sign as soft_sign
from bryo_nnx import softmax as softmax
from bryo_nnx import softplus as softplus
from bryo_nnx import standardize as standardize
from bryo_nnx import swish as swish
from bryo_nnx import tanh as tanh
