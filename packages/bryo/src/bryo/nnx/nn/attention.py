"""`nnx.nn.attention`: attention functions, masks and `MultiHeadAttention`."""

from bryo_nnx import LayerNorm as LayerNorm
from bryo_nnx import LinearGeneral as LinearGeneral
from bryo_nnx import Module as Module
from bryo_nnx import MultiHeadAttention as MultiHeadAttention
from bryo_nnx import combine_masks as combine_masks
from bryo_nnx import dot_product_attention as dot_product_attention
from bryo_nnx import dot_product_attention_weights as dot_product_attention_weights
from bryo_nnx import make_attention_mask as make_attention_mask
from bryo_nnx import make_causal_mask as make_causal_mask
from bryo_nnx.dtypes import PromoteDtypeFn as PromoteDtypeFn
from bryo_nnx.initializers import default_kernel_init as default_kernel_init
