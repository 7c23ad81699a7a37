"""bryo: neural-network modules as data, for JAX.

`import bryo` gives the whole stack. Each part is a small package of its own; this
meta-package gathers them under the names of the systems bryo follows —
`bryo.nnx` (Flax NNX), `bryo.hax` (Haliax), `bryo.mox` (YAX) and `bryo.pytree` — puts the
most used names at top level, and provides the `bryo` command (`bryo demo`,
`bryo plugins`, `bryo mox ...`).

>>> import bryo
>>> graphdef, params, rest = bryo.split(model, bryo.Param, ...)   # doctest: +SKIP
"""

import bryo_pytree as pytree
from bryo_plugins import add_builtin as _add_builtin
from bryo_plugins import add_hookspecs as _add_hookspecs

from . import _commands, _mox_commands
from . import hookspecs as _hookspecs

_add_hookspecs(_hookspecs)
_add_builtin(_commands, name="cli", distribution="bryo")
_add_builtin(_mox_commands, name="mox-cli", distribution="bryo")

# The facades.
# The most used names, at top level.
from bryo_filters import All as All  # noqa: E402
from bryo_filters import Any as Any  # noqa: E402
from bryo_filters import Not as Not  # noqa: E402
from bryo_filters import OfType as OfType  # noqa: E402
from bryo_filters import PathContains as PathContains  # noqa: E402
from bryo_filters import WithTag as WithTag  # noqa: E402
from bryo_filters import to_predicate as to_predicate  # noqa: E402
from bryo_graph import BatchStat as BatchStat  # noqa: E402
from bryo_graph import GraphDef as GraphDef  # noqa: E402
from bryo_graph import Param as Param  # noqa: E402
from bryo_graph import State as State  # noqa: E402
from bryo_graph import Variable as Variable  # noqa: E402
from bryo_graph import VariableState as VariableState  # noqa: E402
from bryo_graph import WithAxis as WithAxis  # noqa: E402
from bryo_graph import clone as clone  # noqa: E402
from bryo_graph import graphdef as graphdef  # noqa: E402
from bryo_graph import iter_graph as iter_graph  # noqa: E402
from bryo_graph import merge as merge  # noqa: E402
from bryo_graph import split as split  # noqa: E402
from bryo_graph import state as state  # noqa: E402
from bryo_graph import update as update  # noqa: E402
from bryo_mox import eval_mox as eval_mox  # noqa: E402
from bryo_mox import make_mox as make_mox  # noqa: E402
from bryo_mox import query as query  # noqa: E402
from bryo_mox import sub as sub  # noqa: E402
from bryo_rngs import Rngs as Rngs  # noqa: E402
from bryo_scan import ScanCheckpointPolicy as ScanCheckpointPolicy  # noqa: E402
from bryo_scan import Stacked as Stacked  # noqa: E402
from bryo_scan import fold as fold  # noqa: E402
from bryo_scan import scan as scan  # noqa: E402
from bryo_transforms import grad as grad  # noqa: E402
from bryo_transforms import jit as jit  # noqa: E402
from bryo_transforms import value_and_grad as value_and_grad  # noqa: E402
from bryo_transforms import vmap as vmap  # noqa: E402

from . import hax as hax  # noqa: E402
from . import mox as mox  # noqa: E402
from . import nnx as nnx  # noqa: E402
from ._checkpoint import CheckpointError as CheckpointError  # noqa: E402
from ._checkpoint import IndexEntry as IndexEntry  # noqa: E402
from ._checkpoint import read_index as read_index  # noqa: E402
from ._checkpoint import restore_state as restore_state  # noqa: E402
from ._checkpoint import save_state as save_state  # noqa: E402
from ._mesh_spec import parse_mesh_spec as parse_mesh_spec  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "All",
    "Any",
    "BatchStat",
    "CheckpointError",
    "GraphDef",
    "IndexEntry",
    "Not",
    "OfType",
    "Param",
    "PathContains",
    "Rngs",
    "ScanCheckpointPolicy",
    "Stacked",
    "State",
    "Variable",
    "VariableState",
    "WithAxis",
    "WithTag",
    "clone",
    "eval_mox",
    "fold",
    "grad",
    "graphdef",
    "hax",
    "iter_graph",
    "jit",
    "make_mox",
    "merge",
    "mox",
    "nnx",
    "pytree",
    "query",
    "read_index",
    "restore_state",
    "scan",
    "save_state",
    "split",
    "state",
    "sub",
    "to_predicate",
    "update",
    "value_and_grad",
    "vmap",
]
