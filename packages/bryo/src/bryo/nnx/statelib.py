"""`bryo.nnx.statelib`: Flax NNX's `nnx.statelib` names, over `bryo_graph`'s `State`."""

from bryo_graph import FlatState as FlatState
from bryo_graph import State as State
from bryo_graph import filter_state as filter_state
from bryo_graph import from_flat_state as from_flat_state
from bryo_graph import map_state as map_state
from bryo_graph import replace_by_pure_dict as replace_by_pure_dict
from bryo_graph import restore_int_paths as restore_int_paths
from bryo_graph import split_state as split_state
from bryo_graph import to_flat_state as to_flat_state
from bryo_graph import to_pure_dict as to_pure_dict

merge_state = State.merge
diff = State.__sub__  # `diff(state, other)`: the leaves of `state` at paths `other` lacks
