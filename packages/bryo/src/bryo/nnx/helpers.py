"""`bryo.nnx.helpers`: Flax NNX's `nnx.helpers` names (containers, `Sequential`,
`TrainState`)."""

from bryo_graph import Dict as Dict
from bryo_graph import GraphDef as GraphDef
from bryo_graph import List as List
from bryo_graph import State as State
from bryo_graph import Variable as Variable
from bryo_nnx import Module as Module
from bryo_nnx import Sequential as Sequential
from bryo_rngs import Rngs as Rngs
from bryo_training import TrainState as TrainState
