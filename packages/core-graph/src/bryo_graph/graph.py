"""The graph functions under the names of `nnx.graph` (seed 000 uses `graph.flatten`).

`graph.flatten(node)` is Flax NNX's: `(graphdef, FlatState)`, whose iteration yields
`(path, leaf)` pairs; the older `state.flat_state()` of seed 000 reads it as a dict.
"""

from bryo_pytree import Key as Key

from ._entries import Entry as Entry
from ._entries import LeafEntry as LeafEntry
from ._entries import NodeEntry as NodeEntry
from ._entries import RefEntry as RefEntry
from ._entries import StaticEntry as StaticEntry
from ._entries import VariableEntry as VariableEntry
from ._graph import GraphDef as GraphDef
from ._graph import clone as clone
from ._graph import graphdef as graphdef
from ._graph import iter_graph as iter_graph
from ._graph import merge as merge
from ._graph import pop as pop
from ._graph import split as split
from ._graph import state as state
from ._graph import update as update
from ._graph_state import GraphState as GraphState
from ._nodes import is_graph_node as is_graph_node
from ._ref_maps import IndexMap as IndexMap
from ._ref_maps import RefMap as RefMap
from ._ref_maps import flatten as flatten
from ._ref_maps import unflatten as unflatten
