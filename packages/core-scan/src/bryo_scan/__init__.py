"""bryo_scan: scan over layers, with memory-saving checkpoint policies.

`scan(f, axis)(init, xs)`, `fold` and `map` are curried versions of `jax.lax.scan` that
scan a positional axis of plain arrays or, through a backend such as bryo-backend-named,
a named axis of NamedArrays. `ScanCheckpointPolicy` chooses what is kept for the backward
pass (`remat=True`, `"nested"`, `"offload"`, saved internals). `Stacked` stores a stack of
identical blocks as one block with stacked arrays and applies it with one scan; `BlockSeq`
does the same with a Python loop. `to_state_dict`/`from_state_dict` read and write
torch-style state dicts (`{"blocks.0.weight": array}`), Haliax's layout. Backends extend
all of this through `hookspecs`; core-scan answers for ints and makes `Stacked`/`BlockSeq`
graph nodes through its built-in plugin `core-scan`, registered when it is imported.
"""

from bryo_plugins import add_builtin as _add_builtin
from bryo_plugins import add_hookspecs as _add_hookspecs

from . import _plugin as _builtin_plugin
from . import hookspecs as hookspecs
from ._hooks import resolve_axis as resolve_axis
from ._hooks import split_graph_block as split_graph_block
from ._policy import CARRY_NAME as CARRY_NAME
from ._policy import INPUTS_NAME as INPUTS_NAME
from ._policy import ScanCheckpointPolicy as ScanCheckpointPolicy
from ._policy import check_can_offload as check_can_offload
from ._policy import nested_outer_blocks as nested_outer_blocks
from ._policy import tree_checkpoint_name as tree_checkpoint_name
from ._scan import Remat as Remat
from ._scan import checkpointed_scan as checkpointed_scan
from ._scan import fold as fold
from ._scan import map as map
from ._scan import scan as scan
from ._stacked import BlockFoldable as BlockFoldable
from ._stacked import BlockSeq as BlockSeq
from ._stacked import Stacked as Stacked
from ._state_dict import StateDict as StateDict
from ._state_dict import StateDictError as StateDictError
from ._state_dict import fields_from_state_dict as fields_from_state_dict
from ._state_dict import fields_to_state_dict as fields_to_state_dict
from ._state_dict import from_state_dict as from_state_dict
from ._state_dict import to_state_dict as to_state_dict
from ._state_dict import with_prefix as with_prefix
from ._types import AxisInfo as AxisInfo
from ._types import BlockSplitter as BlockSplitter
from ._types import NamedLeaf as NamedLeaf
from ._types import OffloadUnavailableError as OffloadUnavailableError
from ._types import ScanAxisError as ScanAxisError
from ._types import ScanOutputError as ScanOutputError
from ._vmap import vmap as vmap

_add_hookspecs(hookspecs)
_add_builtin(_builtin_plugin, name="core-scan", distribution="bryo-core-scan")

__version__ = "0.1.0"
