"""bryo_flax: bryo on Flax Linen and Flax NNX models, with nothing rewritten.

Importing nothing is needed: the plugin registers itself through its entry point. Then
`bryo.mox.make_mox(model.apply)(variables, x)` records every Linen module call as a
`module_call` node (type `Dense`, scope path `ResBlock_0/Dense_0`, fields such as
`features=10`; its variables and rng streams are the node's inputs), Flax NNX module calls
are recorded the same way, and `Stacked`/`BlockSeq`/`bryo.hax.scan` stack and scan Flax
NNX blocks. `LinenState` documents the state a Linen call hands to MoX; `split_block` is
the Flax NNX block splitter. See `docs/flax.md`.
"""

from ._linen import LinenState as LinenState
from ._nnx import split_block as split_block

__version__ = "0.1.0"
