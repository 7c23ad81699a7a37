"""`eval_shape`: run a function of graph nodes abstractly, without computing or allocating.

`eval_shape(lambda: Model(rngs=Rngs(0)))` gives the model with `jax.ShapeDtypeStruct`s in
place of its arrays: its structure, shapes and dtypes (and Variables' metadata) at no cost,
to plan shardings or to restore a checkpoint into. Graph nodes may be arguments too; they
are never changed (the function runs on copies of their state). In simple mode
(`graph_updates=False` or `graph=False`), as in Flax, Variables may not be aliased: an
argument's Variable reached twice, or returned by the function, is an error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import jax

from bryo_graph import GraphDef, HijaxVariable, merge, split, with_vars
from bryo_pytree import Path

from ._options import refuse_bound_method
from ._simple import check_no_aliases, graph_updates_on, tree_mode

T = TypeVar("T")


def eval_shape(
    f: Callable[..., T],
    *args: Any,
    graph: bool | None = None,
    graph_updates: bool | None = None,
    **kwargs: Any,
) -> T:
    """`f(*args, **kwargs)` evaluated abstractly (`jax.eval_shape`) over graph nodes.

    Args:
        f: the function; it may build, take and return modules, `Rngs` and Variables.
        *args: its positional arguments (graph nodes, arrays, static values).
        graph: graph mode (shared references allowed) or tree mode (`graph=False`: the
            arguments must be trees); the thread's default when None.
        graph_updates: with False (simple mode), a Variable reached twice among the
            arguments or returned by `f` is an error, as in Flax.
        **kwargs: its keyword arguments.

    Returns:
        `f`'s output with every array replaced by a `jax.ShapeDtypeStruct` (modules are
        rebuilt around them; a hijax Variable it made is a hijax one holding them).

    Raises:
        ValueError: `f` is a method bound to a graph node; in simple mode, aliased
            Variables (naming both paths).
    """
    refuse_bound_method("eval_shape", f)
    simple = not graph_updates_on(graph, graph_updates)
    tree = tree_mode(graph)
    if simple:  # as Flax: no shared Variables among the arguments (the output may share)
        check_no_aliases("eval_shape", {"args": args, "kwargs": kwargs}, tree=tree)
    graphdef, state = split((args, kwargs), graph=not tree_mode(graph))
    out_graphdef: list[GraphDef] = []

    def pure(state: Any) -> Any:
        call_args, call_kwargs = merge(graphdef, state)
        out = f(*call_args, **call_kwargs)
        if (
            simple
        ):  # the output holds none of the arguments' Variables, shares its own in graph mode
            groups = {"args": call_args, "kwargs": call_kwargs, "out": out}
            check_no_aliases(
                "eval_shape",
                groups,
                tree=tree,
                only="out" if not tree else None,
                shared_out=not tree,
            )
        out_def, out_state = split((out,))  # any output, as a node
        out_graphdef.append(out_def)
        hijax = {p for p, v in out_state.flat_state().items() if isinstance(v, HijaxVariable)}
        out_hijax.append(hijax)
        return with_vars(out_state, hijax=False) if hijax else out_state

    out_hijax: list[set[Path]] = []
    out_state = jax.eval_shape(pure, state)
    if out_hijax[0]:  # hijax Variables again (JAX's abstract value of one is no Variable)
        hijax = out_hijax[0]
        out_state = with_vars(out_state, hijax=True, only=lambda path, _: path in hijax)
    (out,) = merge(out_graphdef[0], out_state)
    return out
