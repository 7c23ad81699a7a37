"""`nnx.nn.stochastic`: `Dropout`."""

from bryo_nnx import Dropout as Dropout
from bryo_nnx import Module as Module
