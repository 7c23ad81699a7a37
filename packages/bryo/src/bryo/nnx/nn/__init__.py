"""`nnx.nn`: the layer modules under Flax NNX's paths (`from bryo.nnx.nn import initializers`)."""

from . import activations as activations
from . import attention as attention
from . import dtypes as dtypes
from . import initializers as initializers
from . import linear as linear
from . import lora as lora
from . import normalization as normalization
from . import recurrent as recurrent
from . import stochastic as stochastic
