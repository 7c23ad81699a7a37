"""`bryo.nnx.spmd`: Flax NNX's `nnx.spmd` names, over `bryo_graph`'s sharding metadata.

`add_axis`/`remove_axis` keep Variables' sharding metadata in step with the axes lifted
transforms add and remove (`transform_metadata={PARTITION_NAME: 'layers'}`).
"""

import warnings as _warnings
from typing import TypeVar as _TypeVar

from bryo_graph import PARTITION_NAME as PARTITION_NAME
from bryo_graph import add_axis as add_axis
from bryo_graph import as_abstract as as_abstract
from bryo_graph import get_abstract_model as get_abstract_model
from bryo_graph import get_named_sharding as get_named_sharding
from bryo_graph import get_partition_spec as get_partition_spec
from bryo_graph import remove_axis as remove_axis
from bryo_graph import with_partitioning as with_partitioning

_A = _TypeVar("_A")


def abstract_with_sharding(tree: _A, graph: bool | None = None) -> _A:
    """Deprecated spelling of `as_abstract` (as in Flax NNX 0.12): warns, then calls it.

    Args:
        tree: a graph node (a module built by `eval_shape`).
        graph: False maps in tree mode.

    Returns:
        What `as_abstract(tree, graph=graph)` returns.
    """
    _warnings.warn(
        "`nnx.abstract_with_sharding` is deprecated; call `nnx.as_abstract` instead "
        "(same arguments, same result).",
        DeprecationWarning,
        stacklevel=2,
    )
    return as_abstract(tree, graph=graph)
