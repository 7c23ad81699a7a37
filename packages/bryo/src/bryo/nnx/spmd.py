"""`bryo.nnx.spmd`: Flax NNX's `nnx.spmd` names, over `bryo_graph`'s sharding metadata.

`add_axis`/`remove_axis` keep Variables' sharding metadata in step with the axes lifted
transforms add and remove (`transform_metadata={PARTITION_NAME: 'layers'}`).
"""

from bryo_graph import PARTITION_NAME as PARTITION_NAME
from bryo_graph import add_axis as add_axis
from bryo_graph import as_abstract as as_abstract
from bryo_graph import get_abstract_model as get_abstract_model
from bryo_graph import get_named_sharding as get_named_sharding
from bryo_graph import get_partition_spec as get_partition_spec
from bryo_graph import remove_axis as remove_axis
from bryo_graph import with_partitioning as with_partitioning
