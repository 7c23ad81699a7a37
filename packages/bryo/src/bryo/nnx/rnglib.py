"""`bryo.nnx.rnglib`: Flax NNX's `nnx.rnglib` names, over `bryo_rngs`."""

from bryo_graph import Variable as Variable
from bryo_rngs import RngCount as RngCount
from bryo_rngs import RngKey as RngKey
from bryo_rngs import Rngs as Rngs
from bryo_rngs import RngState as RngState
from bryo_rngs import RngStream as RngStream
from bryo_rngs import fork_rngs as fork_rngs
from bryo_rngs import reseed as reseed
from bryo_rngs import restore_rngs as restore_rngs
from bryo_rngs import split_rngs as split_rngs
from bryo_rngs import with_rngs as with_rngs
