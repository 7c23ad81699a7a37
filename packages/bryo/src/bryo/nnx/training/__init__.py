"""`nnx.training`: `metrics` and `optimizer`, under Flax NNX's paths."""

from . import metrics as metrics
from . import optimizer as optimizer
