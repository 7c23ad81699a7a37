"""`checkify`: `jax.experimental.checkify.checkify` for functions of graph nodes.

The function runs through the same stages as `remat` (`lifted_call`'s pieces): its
arguments rebuilt inside, the state it changes written back into the caller's objects,
graph nodes it returns reconciled with the caller's. The checkify `Error` comes first in
the result, as in JAX and Flax.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from jax.experimental import checkify as checkify_lib

from bryo_graph import check_tree

from ._apply import apply
from ._call import pure_function
from ._collect import Grouping
from ._layout import scan_args
from ._options import refuse_bound_method
from ._plan import PlanCache
from ._simple import tree_mode


def checkify(
    f: Callable[..., Any],
    errors: frozenset = checkify_lib.user_checks,
    *,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Callable[..., tuple[Any, Any]]:
    """`checkify.checkify(f, errors)` where `f` takes and returns graph nodes.

    Args:
        f: the function to check (it may call `checkify.check`).
        errors: the error kinds to look for (`checkify.user_checks`, `float_checks`,
            `index_checks`, `nan_checks`, `all_checks`, or a union of them).
        graph: False (tree mode) refuses arguments that share a Variable.
        graph_updates: accepted for Flax's signature; changes of structure are always
            written back.

    Returns:
        A function returning `(error, output)`; `error.throw()` raises a failed check.

    Example:
        >>> err, y = checkify(forward, errors=checkify.float_checks)(model, x)  # doctest: +SKIP
    """
    del graph_updates
    refuse_bound_method("checkify", f)
    grouping = Grouping()
    cache = PlanCache(size=16)
    checked: dict[object, Callable] = {}

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        if tree_mode(graph):
            check_tree((args, kwargs), name="checkify")
        key, roots, arrays = scan_args(args, kwargs)
        plan = cache.plan(key, roots)
        fn = checked.get(plan.sig)
        if fn is None:
            fn = checked[plan.sig] = checkify_lib.checkify(
                pure_function(plan.sig, f, grouping), errors
            )
        error, (groups, direct, static) = fn(*plan.values(), arrays)
        return error, apply(plan, static.value, groups, direct)

    return wrapper
