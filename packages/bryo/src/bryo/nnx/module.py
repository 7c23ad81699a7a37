"""`bryo.nnx.module`: Flax NNX's `nnx.module` names, over `bryo_nnx` and `bryo_graph`."""

from bryo_graph import Pytree as Pytree
from bryo_graph import State as State
from bryo_graph import iter_children as iter_children
from bryo_graph import split_state as split_state
from bryo_nnx import Module as Module
from bryo_nnx import capture as capture
from bryo_nnx import iter_module_children as iter_module_children
from bryo_nnx import iter_modules as iter_modules
from bryo_nnx import view as view
from bryo_nnx import view_info as view_info
from bryo_nnx import with_attributes as with_attributes
