"""`from bryo import nnx`: Flax NNX's names over bryo's packages (seeds 000 and 002).

A facade only: every name lives in a core package or the NNX-style backend. Code written
for `from flax import nnx` runs with the import line changed.
"""

import bryo_filters as filterlib
from bryo_filters import All as All
from bryo_filters import Any as Any
from bryo_filters import Everything as Everything
from bryo_filters import Not as Not
from bryo_filters import Nothing as Nothing
from bryo_filters import OfType as OfType
from bryo_filters import PathContains as PathContains
from bryo_filters import PathIn as PathIn
from bryo_filters import WithTag as WithTag
from bryo_graph import BatchStat as BatchStat
from bryo_graph import Cache as Cache
from bryo_graph import GraphDef as GraphDef
from bryo_graph import GraphState as GraphState
from bryo_graph import Intermediate as Intermediate
from bryo_graph import Object as Object
from bryo_graph import Param as Param
from bryo_graph import State as State
from bryo_graph import Variable as Variable
from bryo_graph import VariableState as VariableState
from bryo_graph import clone as clone
from bryo_graph import graph as graph
from bryo_graph import graphdef as graphdef
from bryo_graph import iter_graph as iter_graph
from bryo_graph import merge as merge
from bryo_graph import pop as pop
from bryo_graph import split as split
from bryo_graph import state as state
from bryo_graph import update as update
from bryo_graph import variables as variables
from bryo_nnx import Module as Module
from bryo_rngs import RngCount as RngCount
from bryo_rngs import RngKey as RngKey
from bryo_rngs import Rngs as Rngs
from bryo_rngs import RngState as RngState
from bryo_rngs import RngStream as RngStream
from bryo_rngs import reseed as reseed
