"""`vjp` and `jvp` for functions of graph nodes: `jax.vjp`/`jax.jvp` in simple mode.

As in Flax NNX 0.12, these two run over the arguments as pytrees (`graph_updates=False`
or `graph=False`): cotangents and tangents are shaped like the arguments (a module of
gradients for a module), and the values of Variables the function changed are written
back into the caller's Variables. Structural changes (new attributes) are not lifted;
asking for graph updates is an error that says so.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax

from ._options import refuse_bound_method
from ._simple import (
    Inputs,
    graph_updates_on,
    resolve_aliases,
    resolve_output,
    tree_mode,
    with_empty_aux,
    write_back,
)

_MISSING: Any = object()


def _simple_inputs(name: str, graph: bool | None, graph_updates: bool | None) -> Inputs:
    if graph_updates_on(graph, graph_updates):
        raise ValueError(
            f"`{name}` lifts Variable values only, not graph updates (as Flax NNX); pass "
            f"`graph_updates=False` (or `graph=False`), e.g. `{name}(f, ..., "
            "graph_updates=False)`, or use `grad`/`value_and_grad` for graph updates."
        )
    return Inputs(name, tree_mode(graph))


def vjp(
    f: Callable[..., Any] = _MISSING,
    *primals: Any,
    has_aux: bool = False,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """`jax.vjp` for functions of graph nodes (simple mode).

    Args:
        f: the function; leave it out for a decorator (`@vjp(graph_updates=False)`), or
            give it without `primals` for a function of the primals.
        *primals: the arguments to evaluate `f` at (modules, Variables, arrays).
        has_aux: `f` returns `(out, aux)`; aux is returned as is.
        graph: graph (default) or tree mode (`graph=False`: the arguments must be trees).
        graph_updates: must be False in graph mode: `vjp` lifts values only.

    Returns:
        `(out, vjp_fn)` or, with `has_aux`, `(out, vjp_fn, aux)`; `vjp_fn(cotangent)`
        gives one cotangent per primal, shaped like it. Variables changed by `f` hold
        their new values afterwards.

    Example:
        >>> import jax.numpy as jnp
        >>> out, vjp_fn = vjp(lambda w, x: jnp.sum(w * x), jnp.ones(2), jnp.arange(2.0),
        ...                   graph_updates=False)
        >>> grad_w, grad_x = vjp_fn(jnp.ones(()))
        >>> grad_w.tolist(), grad_x.tolist()
        ([0.0, 1.0], [1.0, 1.0])
    """
    options = {"has_aux": has_aux, "graph": graph, "graph_updates": graph_updates}
    if f is _MISSING:
        return functools.partial(vjp, **options)
    refuse_bound_method("vjp", f)
    if not primals:
        return functools.partial(vjp, f, **options)
    inputs = _simple_inputs("vjp", graph, graph_updates)
    variables = inputs.variables(primals, {})
    shared, _ = inputs.shared(primals, {}, variables)  # what the primals share: given once
    pure = inputs.with_updates(f if has_aux else with_empty_aux(f), split_aux=True)
    out, vjp_fn, (aux, values, changed) = jax.vjp(pure, *shared, has_aux=True)
    write_back(variables, values, changed)
    out, aux = resolve_output((out, aux), changed)
    if variables.repeats:  # the cotangents of a shared node: one object, as the primals
        vjp_fn = _resolving(vjp_fn)
    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


def _resolving(vjp_fn: Callable) -> Callable:
    @functools.wraps(vjp_fn)
    def resolved(cotangent: Any) -> Any:
        return resolve_aliases(vjp_fn(cotangent))

    return resolved


def jvp(
    f: Callable[..., Any] = _MISSING,
    primals: Sequence[Any] = _MISSING,
    tangents: Sequence[Any] = _MISSING,
    *,
    has_aux: bool = False,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """`jax.jvp` for functions of graph nodes (simple mode).

    Args:
        f: the function; leave it out for a decorator (`@jvp(graph_updates=False)`), or
            give it alone for a function of `(primals, tangents)`.
        primals: a tuple of the arguments to evaluate `f` at.
        tangents: a tuple of tangents shaped like `primals` (a module of tangents for a
            module, e.g. `jax.tree.map(jnp.ones_like, model)`).
        has_aux: `f` returns `(out, aux)`; aux is returned as is.
        graph: graph (default) or tree mode (`graph=False`: the arguments must be trees).
        graph_updates: must be False in graph mode: `jvp` lifts values only.

    Returns:
        `(out, tangent_out)` or, with `has_aux`, `(out, tangent_out, aux)`. Variables
        changed by `f` hold their new values afterwards.

    Example:
        >>> import jax.numpy as jnp
        >>> jvp(jnp.sin, (0.0,), (2.0,), graph_updates=False)[1].tolist()
        2.0
    """
    options = {"has_aux": has_aux, "graph": graph, "graph_updates": graph_updates}
    if f is _MISSING:
        return functools.partial(jvp, **options)
    refuse_bound_method("jvp", f)
    if primals is _MISSING:
        return functools.partial(jvp, f, **options)
    if tangents is _MISSING:
        raise TypeError("`jvp` needs `tangents`, a tuple shaped like `primals`.")
    inputs = _simple_inputs("jvp", graph, graph_updates)
    primals, tangents = tuple(primals), tuple(tangents)
    variables = inputs.variables(primals, {})
    marked = [*tangents, {}]  # the tangents of what the primals share are marked alike
    primals, _ = inputs.shared(primals, {}, variables, marked)
    pure = inputs.with_updates(f if has_aux else with_empty_aux(f), split_aux=True)
    out, tangent_out, (aux, values, changed) = jax.jvp(
        pure, primals, tuple(marked[:-1]), has_aux=True
    )
    write_back(variables, values, changed)
    out, aux = resolve_output((out, aux), changed)
    tangent_out = resolve_output(tangent_out, changed)  # marked as `out` is
    return (out, tangent_out, aux) if has_aux else (out, tangent_out)
