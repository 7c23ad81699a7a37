"""`bryo.nnx.bridge`: Flax NNX's `nnx.bridge` names, over `bryo_nnx.bridge`.

Linen modules inside NNX-style models (`ToNNX` + `lazy_init`) and NNX-style modules
inside Linen models (`ToLinen`, `to_linen`). Importing it needs Flax (`pip install flax`);
`bryo.nnx` imports it only when `nnx.bridge` is first used.
"""

from bryo_nnx.bridge import Functional as Functional
from bryo_nnx.bridge import NNXMeta as NNXMeta
from bryo_nnx.bridge import ToLinen as ToLinen
from bryo_nnx.bridge import ToNNX as ToNNX
from bryo_nnx.bridge import functional as functional
from bryo_nnx.bridge import lazy_init as lazy_init
from bryo_nnx.bridge import to_linen as to_linen
from bryo_nnx.bridge import with_partitioning as with_partitioning

from .nn import initializers as initializers
