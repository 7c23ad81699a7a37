"""`nnx.nn.linear`: dense, einsum, convolution and embedding layers."""

from bryo_nnx import Conv as Conv
from bryo_nnx import ConvTranspose as ConvTranspose
from bryo_nnx import Einsum as Einsum
from bryo_nnx import Embed as Embed
from bryo_nnx import Linear as Linear
from bryo_nnx import LinearGeneral as LinearGeneral
