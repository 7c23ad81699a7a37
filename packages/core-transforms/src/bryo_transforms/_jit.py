"""`jit`: `jax.jit` for functions of graph nodes, compiled once per graph structure.

Each call reads the models' Variables through a cached `CallPlan` (a model's flattening
is cached while its structure does not change) and calls one cached `jax.jit` of the
pure function of flat arrays per `Signature`; only the Variables that changed are
written back. A call that changed no structure and returns only arrays skips `apply`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import jax

from ._apply import apply
from ._call import pure_function
from ._collect import Grouping
from ._layout import scan_args
from ._options import as_argnums, decorator_or_none, static_args
from ._plan import PlanCache, Signature, raw_value
from ._simple import Inputs, graph_updates_on, simple_jit, tree_mode

F = TypeVar("F", bound=Callable[..., Any])

_JIT_UNSUPPORTED = frozenset(
    {"in_shardings", "out_shardings", "donate_argnums", "donate_argnames", "abstracted_axes"}
)


def jit(
    f: F | None = None,
    /,
    *,
    static_argnums: int | Sequence[int] = (),
    static_argnames: str | Sequence[str] = (),
    graph: bool | None = None,
    graph_updates: bool | None = None,
    **jit_kwargs: Any,
) -> F:
    """`jax.jit` for functions of graph nodes; state changed inside is written back.

    Graph nodes (modules of any backend, `Rngs`, Variables) may sit anywhere in the
    arguments and the output. Arrays and Python numbers are traced, other values are
    static. The compiled function is cached per graph structure and static arguments.

    Args:
        f: the function (or use `@jit(...)` with options).
        static_argnums: positional arguments that are static (hashable) values.
        static_argnames: keyword arguments that are static (hashable) values.
        graph: with `graph_updates`, graph mode with updates written back (both True,
            the default unless `set_graph_mode`/`set_graph_updates` say otherwise), or
            simple mode (`_simple`): `jax.jit` over the arguments as pytrees, only the
            changed Variables' values written back; `graph=False` also requires trees.
        graph_updates: see `graph`.
        **jit_kwargs: passed on to `jax.jit` (`keep_unused`, `device`, `backend`,
            `inline`, `compiler_options`; in simple mode also `in_shardings`,
            `out_shardings`, `donate_argnums`, `donate_argnames`).

    Returns:
        The jitted function.

    Example:
        >>> @jit
        ... def forward(model, x):
        ...     return model(x)
    """
    partial = decorator_or_none(
        jit,
        f,
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        graph=graph,
        graph_updates=graph_updates,
        **jit_kwargs,
    )
    if partial is not None:
        return partial
    assert f is not None
    argnums = as_argnums(static_argnums, "static_argnums")
    argnames = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
    if not graph_updates_on(graph, graph_updates):
        out_shardings = jit_kwargs.pop("out_shardings", None)
        inputs = Inputs("jit", tree_mode(graph), argnums, argnames)
        return simple_jit(f, inputs, out_shardings, jit_kwargs)  # type: ignore[return-value]
    unsupported = sorted(set(jit_kwargs) & _JIT_UNSUPPORTED)
    if unsupported:
        raise TypeError(
            f"`jit` of graph nodes does not take {', '.join(map(repr, unsupported))} in graph "
            "mode: the compiled function sees flat lists of the models' arrays, not your "
            "arguments. Pass `graph_updates=False` (simple mode: `jax.jit` over the arguments "
            "as pytrees, which takes them), or shard the arrays themselves (`jax.device_put`)."
        )
    cache = PlanCache()
    compiled: dict[Signature, Callable] = {}
    grouping = Grouping()

    def compile_for(sig: Signature) -> Callable:
        fn = compiled[sig] = jax.jit(pure_function(sig, f, grouping), **jit_kwargs)
        return fn

    @functools.wraps(f)
    def jitted(*args: Any, **kwargs: Any) -> Any:
        key, roots, arrays = scan_args(args, kwargs, static_args(args, argnums, argnames))
        plan = cache.plan(key, roots)
        fn = compiled.get(plan.sig) or compile_for(plan.sig)
        groups, direct, static = fn(list(map(raw_value, plan.variables)), plan.raw_values, arrays)
        out_plan = static.value
        if out_plan.graph is None and out_plan.out is None and not out_plan.set_consts:
            write = plan.write
            group = groups[0]
            for update in out_plan.sets:
                write(update.k, group[update.position])
            return direct
        return apply(plan, out_plan, groups, direct)

    jitted.__wrapped__ = f  # type: ignore[attr-defined]
    return jitted  # type: ignore[return-value]
