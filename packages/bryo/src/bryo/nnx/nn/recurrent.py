"""`nnx.nn.recurrent`: recurrent cells, `RNN` and `Bidirectional`."""

from bryo_nnx import RNN as RNN
from bryo_nnx import Bidirectional as Bidirectional
from bryo_nnx import GRUCell as GRUCell
from bryo_nnx import LSTMCell as LSTMCell
from bryo_nnx import OptimizedLSTMCell as OptimizedLSTMCell
from bryo_nnx import RNNCellBase as RNNCellBase
from bryo_nnx import SimpleCell as SimpleCell
from bryo_nnx import flip_sequences as flip_sequences
