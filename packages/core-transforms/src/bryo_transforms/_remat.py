"""`remat`: `jax.checkpoint` for functions of graph nodes."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import jax

from ._call import lifted_call
from ._collect import Grouping
from ._layout import scan_args
from ._options import as_argnums, decorator_or_none, static_args
from ._plan import PlanCache
from ._simple import Inputs, graph_updates_on, simple_remat, tree_mode

F = TypeVar("F", bound=Callable[..., Any])


def remat(
    f: F | None = None,
    /,
    *,
    prevent_cse: bool = True,
    static_argnums: int | Sequence[int] = (),
    policy: Callable[..., bool] | None = None,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> F:
    """`jax.checkpoint` for functions of graph nodes: recompute `f` in the backward pass.

    Args:
        f: the function (or use `@remat(policy=...)`).
        prevent_cse, policy: as for `jax.checkpoint` (`jax.checkpoint_policies.*`).
        static_argnums: arguments that are static values.
        graph: with `graph_updates`, graph mode with updates (the default), or simple
            mode (`jax.checkpoint` over the arguments as pytrees), see `jit`.
        graph_updates: see `graph`.

    Returns:
        The checkpointed function; state changed inside is written back.
    """
    partial = decorator_or_none(
        remat,
        f,
        prevent_cse=prevent_cse,
        static_argnums=static_argnums,
        policy=policy,
        graph=graph,
        graph_updates=graph_updates,
    )
    if partial is not None:
        return partial
    assert f is not None
    argnums = as_argnums(static_argnums, "static_argnums")
    if not graph_updates_on(graph, graph_updates):
        inputs = Inputs("remat", tree_mode(graph), argnums)
        options = {"prevent_cse": prevent_cse, "policy": policy}
        return simple_remat(f, inputs, options)  # type: ignore[return-value]  # the checkpointed function takes f's arguments
    cache = PlanCache(size=16)

    @functools.wraps(f)
    def checkpointed(*args: Any, **kwargs: Any) -> Any:
        key, roots, arrays = scan_args(args, kwargs, static_args(args, argnums, ()))
        plan = cache.plan(key, roots)

        def transform(pure: Callable) -> Callable:
            return jax.checkpoint(pure, prevent_cse=prevent_cse, policy=policy)

        return lifted_call(plan, arrays, transform, f, Grouping())

    return checkpointed  # type: ignore[return-value]  # the wrapper has f's signature (functools.wraps)
