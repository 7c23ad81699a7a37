"""`make_jaxpr` for functions of graph nodes: `jax.make_jaxpr` over them as pytrees.

As in Flax NNX 0.12 it runs in simple mode only: the arguments are traced as pytrees,
the caller's Variables are never changed (the function runs on traced copies), aliased
Variables are refused, and asking for graph updates is an error that says what to pass.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax

from ._options import refuse_bound_method
from ._simple import Inputs, check_no_aliases, graph_updates_on, tree_mode

_MISSING: Any = object()


def make_jaxpr(
    f: Callable[..., Any] = _MISSING,
    *,
    static_argnums: int | Sequence[int] = (),
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """`jax.make_jaxpr` for functions of graph nodes (simple mode).

    Args:
        f: the function (or use `@make_jaxpr(graph_updates=False)`).
        static_argnums: as for `jax.make_jaxpr`.
        graph: graph (default) or tree mode (`graph=False`: the arguments must be trees).
        graph_updates: must be False in graph mode: the jaxpr shows values only.

    Returns:
        A function of `f`'s arguments returning its `ClosedJaxpr`; the arguments are left
        unchanged.

    Example:
        >>> import jax.numpy as jnp
        >>> jaxpr = make_jaxpr(jnp.sin, graph_updates=False)(1.0)
        >>> print(*[eqn.primitive.name for eqn in jaxpr.eqns])
        sin
    """
    options = {"static_argnums": static_argnums, "graph": graph, "graph_updates": graph_updates}
    if f is _MISSING:
        return functools.partial(make_jaxpr, **options)
    if graph_updates_on(graph, graph_updates):
        raise ValueError(
            "nnx.make_jaxpr does not support graph_updates=True. Pass `graph_updates=False` "
            "(or `graph=False`): the jaxpr is traced over the arguments as pytrees."
        )
    refuse_bound_method("make_jaxpr", f)
    nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    inputs = Inputs("make_jaxpr", tree_mode(graph), nums)

    def traced(*args: Any, **kwargs: Any) -> Any:
        args, kwargs = inputs.inside(args, kwargs)
        return f(*args, **kwargs)

    maker = jax.make_jaxpr(traced, static_argnums=static_argnums)

    @functools.wraps(f)
    def jaxpr_of(*args: Any, **kwargs: Any) -> Any:
        if inputs.tree:
            check_no_aliases("make_jaxpr", {"args": args, "kwargs": kwargs}, tree=True)
        # graph mode: a graph node or Variable the arguments share is one object inside
        args, kwargs = inputs.shared(args, kwargs, inputs.variables(args, kwargs))
        return maker(*args, **kwargs)

    return jaxpr_of
