"""`nnx.nn.stochastic`: `Dropout`."""

from bryo_nnx import Dropout as Dropout
