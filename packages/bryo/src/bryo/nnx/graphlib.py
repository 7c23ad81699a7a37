"""`bryo.nnx.graphlib`: Flax NNX's `nnx.graphlib` names that bryo has, over `bryo_graph`."""

from bryo_graph import FlatState as FlatState
from bryo_graph import GraphDef as GraphDef
from bryo_graph import GraphState as GraphState
from bryo_graph import PureState as PureState
from bryo_graph import as_pure as as_pure
from bryo_graph import cached_partial as cached_partial
from bryo_graph import call as call
from bryo_graph import clone as clone
from bryo_graph import find_duplicates as find_duplicates
from bryo_graph import flatten as flatten
from bryo_graph import graphdef as graphdef
from bryo_graph import iter_graph as iter_graph
from bryo_graph import map as map
from bryo_graph import merge as merge
from bryo_graph import pop as pop
from bryo_graph import pure as pure
from bryo_graph import recursive_map as recursive_map
from bryo_graph import set_graph_mode as set_graph_mode
from bryo_graph import set_graph_updates as set_graph_updates
from bryo_graph import set_metadata as set_metadata
from bryo_graph import split as split
from bryo_graph import state as state
from bryo_graph import unflatten as unflatten
from bryo_graph import unpack as unpack
from bryo_graph import update as update
from bryo_graph import variables as variables
