"""The five stages strung together: the pure function a JAX transform sees, and one call.

`pure_function` is what every transform hands to JAX: flat values in, rebuilt arguments
through the user's function, groups and a static `OutPlan` out. `vmap` and `remat` wrap
it in their JAX transform and run it once per call with `lifted_call`; `jit` caches
`jax.jit` of it per Signature; `grad` and `scan` drive the stages themselves because
they split the inputs (differentiated or not; carried, scanned or broadcast).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._apply import apply
from ._collect import Grouping, Static, collect
from ._plan import CallPlan, Signature
from ._rebuild import join_leaves, rebuild


def pure_function(sig: Signature, f: Callable, grouping: Grouping) -> Callable:
    """`pure(var_values, raw_values, arrays) -> (groups, direct, Static(OutPlan))`: `f`
    on arguments rebuilt from `sig` and the values, its changes collected."""

    def pure(var_values: list, raw_values: list, arrays: list) -> tuple:
        args, kwargs, inner = rebuild(sig, join_leaves(sig, var_values, raw_values), arrays)
        groups, direct, out_plan = collect(inner, f(*args, **kwargs), grouping)
        return groups, direct, Static(out_plan)

    return pure


def lifted_call(
    plan: CallPlan,
    arrays: list,
    transform: Callable[[Callable], Callable],
    f: Callable,
    grouping: Grouping,
) -> Any:
    """Run `f` under `transform` of the pure function of `plan`, then apply the updates.

    `transform(pure)` returns a function of `(var_values, raw_values, arrays)`, `pure`
    being `pure_function(plan.sig, f, grouping)`.
    """
    pure = pure_function(plan.sig, f, grouping)
    var_values, raw_values = plan.values()
    groups, direct, static = transform(pure)(var_values, raw_values, arrays)
    return apply(plan, static.value, groups, direct)
