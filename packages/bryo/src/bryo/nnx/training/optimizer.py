"""`nnx.optimizer` (`nnx.training.optimizer`): the optax optimizer over a model's Variables."""

from bryo_training import ModelAndOptimizer as ModelAndOptimizer
from bryo_training import OptArray as OptArray
from bryo_training import Optimizer as Optimizer
from bryo_training import OptState as OptState
from bryo_training import OptVariable as OptVariable
from bryo_training import to_opt_state as to_opt_state
