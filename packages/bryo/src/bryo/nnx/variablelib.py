"""`bryo.nnx.variablelib`: Flax NNX's `nnx.variablelib` names, over `bryo_graph`'s Variables."""

from bryo_graph import BatchStat as BatchStat
from bryo_graph import Cache as Cache
from bryo_graph import HijaxVariable as HijaxVariable
from bryo_graph import Intermediate as Intermediate
from bryo_graph import Param as Param
from bryo_graph import VarDefaults as VarDefaults
from bryo_graph import Variable as Variable
from bryo_graph import VariableMetadata as VariableMetadata
from bryo_graph import VariableState as VariableState
from bryo_graph import register_variable_name as register_variable_name
from bryo_graph import use_eager_sharding as use_eager_sharding
from bryo_graph import using_eager_sharding as using_eager_sharding
from bryo_graph import var_defaults as var_defaults
from bryo_graph import variable_name_from_type as variable_name_from_type
from bryo_graph import variable_type_from_name as variable_type_from_name
from bryo_graph import with_metadata as with_metadata
