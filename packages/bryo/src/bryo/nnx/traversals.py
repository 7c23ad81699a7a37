"""`bryo.nnx.traversals`: Flax NNX's `nnx.traversals`, over `bryo_graph.traversals`."""

from bryo_graph.traversals import IsLeafCallable as IsLeafCallable
from bryo_graph.traversals import empty_node as empty_node
from bryo_graph.traversals import flatten_mapping as flatten_mapping
from bryo_graph.traversals import flatten_to_sequence as flatten_to_sequence
from bryo_graph.traversals import unflatten_mapping as unflatten_mapping
