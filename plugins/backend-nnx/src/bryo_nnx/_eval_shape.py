"""`eval_shape`: run a function of graph nodes abstractly, without computing or allocating.

`eval_shape(lambda: Model(rngs=Rngs(0)))` gives the model with `jax.ShapeDtypeStruct`s in
place of its arrays: its structure, shapes and dtypes (and Variables' metadata) at no cost,
to plan shardings or to restore a checkpoint into. Graph nodes may be arguments too; they
are not changed (the function runs on copies).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import jax

from bryo_graph import GraphDef, merge, split

T = TypeVar("T")


def eval_shape(f: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`f(*args, **kwargs)` evaluated abstractly (`jax.eval_shape`) over graph nodes.

    Args:
        f: the function; it may build, take and return modules, `Rngs` and Variables.
        *args: its positional arguments (graph nodes, arrays, static values).
        **kwargs: its keyword arguments.

    Returns:
        `f`'s output with every array replaced by a `jax.ShapeDtypeStruct` (modules are
        rebuilt around them).
    """
    graphdef, state = split((args, kwargs))
    out_graphdef: list[GraphDef] = []

    def pure(state: Any) -> Any:
        call_args, call_kwargs = merge(graphdef, state)
        out_def, out_state = split((f(*call_args, **call_kwargs),))  # any output, as a node
        out_graphdef.append(out_def)
        return out_state

    out_state = jax.eval_shape(pure, state)
    (out,) = merge(out_graphdef[0], out_state)
    return out
