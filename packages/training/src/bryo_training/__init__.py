"""bryo_training: Flax NNX's training helpers on bryo's graph, over optax.

`Optimizer` applies an optax transformation in place to the Variables a `wrt=` filter
selects (`ModelAndOptimizer` keeps the model for the older `update(grads)`); `TrainState`
is the functional alternative, a pytree of graphdef, params and optax state; `metrics`
accumulate `Average`, `Accuracy` and `Welford` statistics over batches; `EMA` keeps a moving
average of a model's Variables. Everything works on
any bryo graph node, NNX-style modules and Equinox models alike. A separate distribution
so that the module backends do not depend on optax.
"""

from . import metrics as metrics
from ._ema import EMA as EMA
from ._metrics import Metric as Metric
from ._metrics import MultiMetric as MultiMetric
from ._optimizer import ModelAndOptimizer as ModelAndOptimizer
from ._optimizer import OptArray as OptArray
from ._optimizer import Optimizer as Optimizer
from ._optimizer import OptState as OptState
from ._optimizer import OptVariable as OptVariable
from ._optimizer import to_opt_state as to_opt_state
from ._train_state import TrainState as TrainState

__version__ = "0.1.0"
