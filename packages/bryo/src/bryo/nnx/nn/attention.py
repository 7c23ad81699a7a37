"""`nnx.nn.attention`: attention functions, masks and `MultiHeadAttention`."""

from bryo_nnx import MultiHeadAttention as MultiHeadAttention
from bryo_nnx import combine_masks as combine_masks
from bryo_nnx import dot_product_attention as dot_product_attention
from bryo_nnx import dot_product_attention_weights as dot_product_attention_weights
from bryo_nnx import make_attention_mask as make_attention_mask
from bryo_nnx import make_causal_mask as make_causal_mask
