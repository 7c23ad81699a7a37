"""bryo: neural-network modules as data, for JAX.

`import bryo` gives the whole stack. Each part is a small package of its own; this
meta-package re-exports them under short names (`bryo.pytree`, `bryo.nnx`, and as they
land `bryo.hax`, `bryo.mox`), puts the most used names at top level, and provides the
`bryo` command.
"""

import bryo_pytree as pytree
from bryo_pytree import add_hookspecs as _add_hookspecs

from . import hookspecs as _hookspecs

_add_hookspecs(_hookspecs)

from bryo_filters import to_predicate as to_predicate  # noqa: E402
from bryo_graph import GraphDef as GraphDef  # noqa: E402
from bryo_graph import State as State  # noqa: E402
from bryo_graph import clone as clone  # noqa: E402
from bryo_graph import graphdef as graphdef  # noqa: E402
from bryo_graph import merge as merge  # noqa: E402
from bryo_graph import split as split  # noqa: E402
from bryo_graph import state as state  # noqa: E402
from bryo_graph import update as update  # noqa: E402

from . import nnx as nnx  # noqa: E402

__version__ = "0.1.0"
