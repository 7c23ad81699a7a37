"""`bryo.nnx.extract`: Flax NNX's `nnx.extract` names that bryo has, over `bryo_graph`
(`to_tree`/`from_tree` and their pieces; not Flax's internal prefix machinery)."""

from bryo_graph.extract import Missing as Missing
from bryo_graph.extract import NodeStates as NodeStates
from bryo_graph.extract import Opaque as Opaque
from bryo_graph.extract import TreeState as TreeState
from bryo_graph.extract import broadcast_prefix as broadcast_prefix
from bryo_graph.extract import check_consistent_aliasing as check_consistent_aliasing
from bryo_graph.extract import clear_non_graph_nodes as clear_non_graph_nodes
from bryo_graph.extract import default_split_fn as default_split_fn
from bryo_graph.extract import from_tree as from_tree
from bryo_graph.extract import is_tree_node as is_tree_node
from bryo_graph.extract import merge_tree_node as merge_tree_node
from bryo_graph.extract import to_tree as to_tree
