"""`nnx.nn.recurrent`: recurrent cells, `RNN` and `Bidirectional`."""

from bryo_nnx import RNN as RNN
from bryo_nnx import Bidirectional as Bidirectional
from bryo_nnx import GRUCell as GRUCell
from bryo_nnx import Linear as Linear
from bryo_nnx import LSTMCell as LSTMCell
from bryo_nnx import Module as Module
from bryo_nnx import OptimizedLSTMCell as OptimizedLSTMCell
from bryo_nnx import RNNCellBase as RNNCellBase
from bryo_nnx import SimpleCell as SimpleCell
from bryo_nnx import flip_sequences as flip_sequences
from bryo_nnx import sigmoid as sigmoid
from bryo_nnx import tanh as tanh
from bryo_nnx.dtypes import PromoteDtypeFn as PromoteDtypeFn
from bryo_nnx.initializers import default_bias_init as default_bias_init
from bryo_nnx.initializers import default_kernel_init as default_kernel_init
