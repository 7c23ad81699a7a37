"""The graph functions under the names of `nnx.graph` (seed 000 uses `graph.flatten`)."""

from bryo_pytree import Key as Key

from ._entries import Entry as Entry
from ._entries import LeafEntry as LeafEntry
from ._entries import NodeEntry as NodeEntry
from ._entries import RefEntry as RefEntry
from ._entries import StaticEntry as StaticEntry
from ._entries import VariableEntry as VariableEntry
from ._graph import GraphDef as GraphDef
from ._graph import clone as clone
from ._graph import flatten_state
from ._graph import graphdef as graphdef
from ._graph import iter_graph as iter_graph
from ._graph import merge as merge
from ._graph import pop as pop
from ._graph import split as split
from ._graph import state as state
from ._graph import unflatten as unflatten
from ._graph import update as update
from ._graph_state import GraphState as GraphState
from ._nodes import is_graph_node as is_graph_node

flatten = flatten_state  # seed 000's `graph.flatten`: `(graphdef, State)`
