"""bryo_nnx: the NNX-style backend — mutable `Module`s holding `Variable`s, and Flax NNX's layers.

Modules are ordinary Python objects; their Variables, submodules (alone, or in lists and
dicts) and static attributes form a graph that bryo's graph functions split into a
GraphDef and States and merge back. The layers follow Flax NNX 0.12 (same keywords, same
initialisation order, same numbers for the same `Rngs`). `bryo.nnx` is the facade that
gathers this backend and the core packages under Flax NNX's names.
"""

from bryo_graph import render as render
from bryo_transforms import eval_shape as eval_shape

from . import dtypes as dtypes
from . import initializers as initializers
from ._activations import PReLU as PReLU
from ._activations import celu as celu
from ._activations import elu as elu
from ._activations import gelu as gelu
from ._activations import glu as glu
from ._activations import hard_sigmoid as hard_sigmoid
from ._activations import hard_silu as hard_silu
from ._activations import hard_swish as hard_swish
from ._activations import hard_tanh as hard_tanh
from ._activations import identity as identity
from ._activations import leaky_relu as leaky_relu
from ._activations import log_sigmoid as log_sigmoid
from ._activations import log_softmax as log_softmax
from ._activations import logsumexp as logsumexp
from ._activations import mish as mish
from ._activations import one_hot as one_hot
from ._activations import relu as relu
from ._activations import relu6 as relu6
from ._activations import selu as selu
from ._activations import sigmoid as sigmoid
from ._activations import silu as silu
from ._activations import soft_sign as soft_sign
from ._activations import softmax as softmax
from ._activations import softplus as softplus
from ._activations import standardize as standardize
from ._activations import swish as swish
from ._activations import tanh as tanh
from ._attention import MultiHeadAttention as MultiHeadAttention
from ._attention import combine_masks as combine_masks
from ._attention import dot_product_attention as dot_product_attention
from ._attention import dot_product_attention_weights as dot_product_attention_weights
from ._attention import make_attention_mask as make_attention_mask
from ._attention import make_causal_mask as make_causal_mask
from ._capture import Perturbation as Perturbation
from ._conv import Conv as Conv
from ._conv import ConvTranspose as ConvTranspose
from ._display import display as display
from ._dropout import Dropout as Dropout
from ._embed import Embed as Embed
from ._linear import Einsum as Einsum
from ._linear import Linear as Linear
from ._linear import LinearGeneral as LinearGeneral
from ._lora import LoRA as LoRA
from ._lora import LoRALinear as LoRALinear
from ._lora import LoRAParam as LoRAParam
from ._module import Module as Module
from ._module_helpers import capture as capture
from ._module_helpers import iter_module_children as iter_module_children
from ._module_helpers import iter_modules as iter_modules
from ._module_helpers import view as view
from ._module_helpers import view_info as view_info
from ._module_helpers import with_attributes as with_attributes
from ._normalization import BatchNorm as BatchNorm
from ._normalization import GroupNorm as GroupNorm
from ._normalization import InstanceNorm as InstanceNorm
from ._normalization import LayerNorm as LayerNorm
from ._normalization import RMSNorm as RMSNorm
from ._pooling import avg_pool as avg_pool
from ._pooling import max_pool as max_pool
from ._pooling import min_pool as min_pool
from ._pooling import pool as pool
from ._recurrent import RNN as RNN
from ._recurrent import Bidirectional as Bidirectional
from ._recurrent import GRUCell as GRUCell
from ._recurrent import LSTMCell as LSTMCell
from ._recurrent import OptimizedLSTMCell as OptimizedLSTMCell
from ._recurrent import RNNCellBase as RNNCellBase
from ._recurrent import SimpleCell as SimpleCell
from ._recurrent import flip_sequences as flip_sequences
from ._sequential import Sequential as Sequential
from ._summary import CallInfo as CallInfo
from ._summary import tabulate as tabulate
from ._weight_norms import SpectralNorm as SpectralNorm
from ._weight_norms import WeightNorm as WeightNorm

__version__ = "0.1.0"
