"""Neural-network helpers on NamedArrays: activations, softmax and friends by axis name.

The scan-over-layers containers (`Stacked`, `BlockSeq`) live in bryo_scan; `bryo.hax.nn`
gathers both.
"""

from ._ops import gelu as gelu
from ._ops import log_softmax as log_softmax
from ._ops import logsumexp as logsumexp
from ._ops import relu as relu
from ._ops import sigmoid as sigmoid
from ._ops import silu as silu
from ._ops import softmax as softmax
from ._ops import softplus as softplus
