"""`bryo_graph.extract`: `to_tree`/`from_tree` and the pieces they are made of (Flax NNX's
`nnx.extract` names that bryo has)."""

from ._to_tree import Missing as Missing
from ._to_tree import NodeStates as NodeStates
from ._to_tree import broadcast_prefix as broadcast_prefix
from ._to_tree import check_consistent_aliasing as check_consistent_aliasing
from ._to_tree import clear_non_graph_nodes as clear_non_graph_nodes
from ._to_tree import default_split_fn as default_split_fn
from ._to_tree import from_tree as from_tree
from ._to_tree import is_tree_node as is_tree_node
from ._to_tree import merge_tree_node as merge_tree_node
from ._to_tree import to_tree as to_tree
