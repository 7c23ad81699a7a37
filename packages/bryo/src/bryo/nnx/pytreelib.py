"""`bryo.nnx.pytreelib`: Flax NNX's `nnx.pytreelib` names (`Pytree`, `Object`, the
data/static markers), over `bryo_graph`."""

from bryo_graph import Data as Data
from bryo_graph import GraphObject as Object
from bryo_graph import Pytree as Pytree
from bryo_graph import Static as Static
from bryo_graph import Variable as Variable
from bryo_graph import check_pytree as check_pytree
from bryo_graph import data as data
from bryo_graph import dataclass as dataclass
from bryo_graph import has_data as has_data
from bryo_graph import is_data as is_data
from bryo_graph import register_data_type as register_data_type
from bryo_graph import static as static
