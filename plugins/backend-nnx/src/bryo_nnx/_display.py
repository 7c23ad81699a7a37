"""`display`: show Modules, `Rngs`, States and Variables as readable trees.

In a notebook (IPython) with treescope installed, `display` hands each node to
`treescope.display`, which draws a foldable tree through the nodes' `__treescope_repr__`
(as Flax NNX's `nnx.display` does). Elsewhere it prints `bryo_graph.render`'s text, the
same as `repr(module)`: one attribute per line, arrays as `f32[20,10]` (scalars with their
value), typed keys as `key<fry>[]`, and each module's first line counting its Variables by
type (`# Param: 44 (176 B), BatchStat: 8 (32 B), Total: 52 (208 B)`).
"""

from __future__ import annotations

import sys
from types import ModuleType

from bryo_graph import render


def display(*nodes: object) -> None:
    """Show each of `nodes` (Modules, Rngs, States, Variables, ...): with treescope in a
    notebook, as treescope's foldable tree; otherwise printed as `render(node)`'s indented
    text (Variables as blocks with their sizes; other values as their repr)."""
    treescope = _notebook_treescope()
    for node in nodes:
        if treescope is not None:
            treescope.display(node, ignore_exceptions=True)
        else:
            print(render(node))


def _notebook_treescope() -> ModuleType | None:
    """treescope, when it is installed and this runs inside IPython; None otherwise."""
    ipython = sys.modules.get("IPython")
    if ipython is None or getattr(ipython, "get_ipython", lambda: None)() is None:
        return None
    try:
        import treescope
    except ImportError:
        return None
    return treescope
