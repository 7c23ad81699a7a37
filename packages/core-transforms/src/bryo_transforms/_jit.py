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
        **jit_kwargs: passed on to `jax.jit` (`keep_unused`, `device`, `backend`,
            `inline`, `compiler_options`).

    Returns:
        The jitted function.

    Example:
        >>> @jit
        ... def forward(model, x):
        ...     return model(x)
    """
    partial = decorator_or_none(
        jit, f, static_argnums=static_argnums, static_argnames=static_argnames, **jit_kwargs
    )
    if partial is not None:
        return partial
    assert f is not None
    unsupported = sorted(set(jit_kwargs) & _JIT_UNSUPPORTED)
    if unsupported:
        raise TypeError(
            f"`jit` of graph nodes does not take {', '.join(map(repr, unsupported))}: the "
            "compiled function sees flat lists of the models' arrays, not your arguments. "
            "Shard the arrays themselves (`jax.device_put`) before the call instead."
        )
    argnums = as_argnums(static_argnums, "static_argnums")
    argnames = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
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
