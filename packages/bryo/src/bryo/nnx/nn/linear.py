"""`nnx.nn.linear`: dense, einsum, convolution and embedding layers."""

from bryo_nnx import Conv as Conv
from bryo_nnx import ConvTranspose as ConvTranspose
from bryo_nnx import Einsum as Einsum
from bryo_nnx import Embed as Embed
from bryo_nnx import Linear as Linear
from bryo_nnx import LinearGeneral as LinearGeneral
from bryo_nnx import Module as Module
from bryo_nnx.dtypes import PromoteDtypeFn as PromoteDtypeFn
from bryo_nnx.initializers import default_bias_init as default_bias_init
from bryo_nnx.initializers import default_embed_init as default_embed_init
from bryo_nnx.initializers import default_kernel_init as default_kernel_init
