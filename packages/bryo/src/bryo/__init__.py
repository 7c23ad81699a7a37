"""bryo: neural-network modules as data, for JAX.

`import bryo` gives the whole stack. Each part is a small package of its own; this
meta-package re-exports them under short names (`bryo.pytree`, and as they land
`bryo.nnx`, `bryo.hax`, `bryo.mox`) and provides the `bryo` command.
"""

import bryo_pytree as pytree

from . import hookspecs as _hookspecs
from bryo_pytree import add_hookspecs as _add_hookspecs

_add_hookspecs(_hookspecs)

__version__ = "0.1.0"

__all__ = ["pytree"]
