"""Flax Linen and NNX-style modules together (Flax NNX's `nnx.bridge`).

`ToNNX(linen_module, rngs=...)` with `lazy_init(model, *inputs)` makes a Linen module an
NNX-style module (its collections become Variables); `ToLinen(cls, args=..., kwargs=...)`
or `to_linen(cls, *args, **kwargs)` makes an NNX-style module class a Linen module (its
Variables go to Linen collections). `NNXMeta` boxes a Variable's metadata in Linen;
`with_partitioning` is Linen's, for NNX-style initializers; `functional(cls)` gives a
class Linen's `init`/`apply` pair. Needs Flax (`pip install
flax`); importing `bryo_nnx` does not.
"""

from ._collections import NNXMeta as NNXMeta
from ._collections import to_linen_var as to_linen_var
from ._collections import to_nnx_var as to_nnx_var
from ._collections import with_partitioning as with_partitioning
from ._flax import MISSING_FLAX as MISSING_FLAX
from ._functional import Functional as Functional
from ._functional import functional as functional
from ._to_linen import ToLinen as ToLinen
from ._to_linen import to_linen as to_linen
from ._to_nnx import ToNNX as ToNNX
from ._to_nnx import lazy_init as lazy_init
