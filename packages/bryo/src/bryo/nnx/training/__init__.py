"""`nnx.training`: `ema`, `metrics` and `optimizer`, under Flax NNX's paths."""

from . import ema as ema
from . import metrics as metrics
from . import optimizer as optimizer
