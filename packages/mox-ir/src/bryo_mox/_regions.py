"""Bind a higher-order equation around re-traced regions, threading their new inputs.

`sub` and `loads` rebuild the sub-jaxprs of `scan`, `while`, `cond`, `remat` (and
`closed_call`) by tracing them again with `jax.make_jaxpr`. A re-traced region may close
over values the original did not: the new parameters of a LoRA adapter inside a scanned
layer are tracers of the enclosing trace, and a rebuilt body may capture array constants.
Such values cannot stay constants of the sub-jaxpr (a tracer must not escape its trace,
and `remat`'s open jaxpr takes none), so they become extra operands of the equation: a
scan gets more `num_consts`, a while loop more `cond_nconsts`/`body_nconsts`, a cond and
a remat more inputs (every branch of a cond takes all of them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import jax
import jax.core
from jax.extend import core as jex

from ._errors import MoxError

RegionKey = tuple[str, int | None]

#: Primitives whose single region takes exactly the equation's operands.
CALL_LIKE = frozenset({"remat2", "checkpoint", "remat", "closed_call", "core_call"})


def _hoist(closed: jex.ClosedJaxpr, open_param: bool) -> tuple[Any, list[Any]]:
    """The region as the param wants it (`Jaxpr` or `ClosedJaxpr`), and the constants that
    must become operands, in the order of the new leading invars.

    Tracers always move out; concrete arrays move out only for an open-jaxpr param.
    """
    jaxpr = closed.jaxpr
    keep_vars, keep_vals, move_vars, move_vals = [], [], [], []
    for var, value in zip(jaxpr.constvars, closed.consts, strict=True):
        if open_param or isinstance(value, jax.core.Tracer):
            move_vars.append(var)
            move_vals.append(value)
        else:
            keep_vars.append(var)
            keep_vals.append(value)
    if move_vars:
        debug_info = jaxpr.debug_info
        jaxpr = jex.Jaxpr(
            keep_vars,
            [*move_vars, *jaxpr.invars],
            jaxpr.outvars,
            jaxpr.eqns,
            jaxpr.effects,
            debug_info.with_unknown_names() if debug_info is not None else None,  # type: ignore[arg-type]  # jax's default is None
        )
    new: Any = jaxpr if open_param else jex.ClosedJaxpr(jaxpr, keep_vals)
    return new, move_vals


def _with_leading(region: Any, avals: Sequence[Any], own: int, before: int) -> Any:
    """`region` (whose first `own` invars are its hoisted values) taking the whole list
    of hoisted values: fresh unused variables for the other regions' ones, `before` of
    them ahead of its own."""
    jaxpr = region.jaxpr if isinstance(region, jex.ClosedJaxpr) else region
    head = [jex.Var(a) for a in avals[:before]]
    tail = [jex.Var(a) for a in avals[before + own :]]
    invars = [*head, *jaxpr.invars[:own], *tail, *jaxpr.invars[own:]]
    debug_info = jaxpr.debug_info
    jaxpr = jex.Jaxpr(
        jaxpr.constvars,
        invars,
        jaxpr.outvars,
        jaxpr.eqns,
        jaxpr.effects,
        debug_info.with_unknown_names() if debug_info is not None else None,  # type: ignore[arg-type]  # jax's default is None
    )
    return jex.ClosedJaxpr(jaxpr, region.consts) if isinstance(region, jex.ClosedJaxpr) else jaxpr


def bind_with_regions(
    prim: jex.Primitive,
    params: Mapping[str, Any],
    ins: Sequence[Any],
    traced: Mapping[RegionKey, jex.ClosedJaxpr],
    open_params: Mapping[RegionKey, bool],
    where: Callable[[], str],
) -> list[Any]:
    """Bind `prim` on `ins` with its regions replaced by `traced`.

    Args:
        prim: the equation's primitive.
        params: its params (regions not yet replaced).
        ins: its operands.
        traced: `(param, index) -> ClosedJaxpr` traced with the region's own inputs.
        open_params: `(param, index) -> True` where the param holds an open `Jaxpr`.
        where: a description of the equation for error messages.

    Returns:
        The equation's outputs as a list.
    """
    params = dict(params)
    ins = list(ins)
    hoisted: dict[RegionKey, list[Any]] = {}
    regions: dict[RegionKey, Any] = {}
    for key, closed in traced.items():
        regions[key], hoisted[key] = _hoist(closed, open_params.get(key, False))
    if any(hoisted.values()):
        ins = _thread(prim.name, params, ins, regions, hoisted, where)
    wholes: dict[str, Any] = {}  # a param that is one region
    parts: dict[str, dict[int, Any]] = {}  # a param that is a tuple of them, by index
    for (key, index), region in regions.items():
        if index is None:
            wholes[key] = region
        else:
            parts.setdefault(key, {})[index] = region
    params.update(wholes)
    for key, by_index in parts.items():
        if key not in wholes:
            old = list(params[key])
            for index, region in by_index.items():
                old[index] = region
            params[key] = tuple(old)
    out = prim.bind(*ins, **params)
    return list(out) if prim.multiple_results else [out]


def _thread(
    name: str,
    params: dict[str, Any],
    ins: list[Any],
    regions: dict[RegionKey, Any],
    hoisted: dict[RegionKey, list[Any]],
    where: Callable[[], str],
) -> list[Any]:
    """Add the hoisted values as operands; update counting params in place."""
    if name == "scan" and set(hoisted) == {("jaxpr", None)}:
        new = hoisted["jaxpr", None]
        params["num_consts"] = params["num_consts"] + len(new)
        if "linear" in params:
            params["linear"] = (False,) * len(new) + tuple(params["linear"])
        return [*new, *ins]
    if name == "while" and set(hoisted) <= {("cond_jaxpr", None), ("body_jaxpr", None)}:
        cond_new = hoisted.get(("cond_jaxpr", None), [])
        body_new = hoisted.get(("body_jaxpr", None), [])
        n_cond, n_body = params["cond_nconsts"], params["body_nconsts"]
        params["cond_nconsts"] = n_cond + len(cond_new)
        params["body_nconsts"] = n_body + len(body_new)
        return [
            *cond_new,
            *ins[:n_cond],
            *body_new,
            *ins[n_cond : n_cond + n_body],
            *ins[n_cond + n_body :],
        ]
    if name == "cond" and all(key == "branches" for key, _ in hoisted):
        order = sorted(hoisted, key=lambda k: cast(int, k[1]))  # every branch has an index
        values = [v for k in order for v in hoisted[k]]
        avals = [jax.typeof(v) for v in values]
        before = 0
        for key in order:
            own = len(hoisted[key])
            regions[key] = _with_leading(regions[key], avals, own, before)
            before += own
        for key in [k for k in regions if k[0] == "branches" and k not in hoisted]:
            regions[key] = _with_leading(regions[key], avals, 0, 0)
        branches = params["branches"]
        for index in range(len(branches)):
            if ("branches", index) not in regions:
                regions["branches", index] = _with_leading(branches[index], avals, 0, 0)
        return [ins[0], *values, *ins[1:]]
    if name in CALL_LIKE and len(hoisted) == 1:
        ((new),) = hoisted.values()
        return [*new, *ins]
    raise MoxError(
        f"cannot substitute inside {where()}: the rewritten region needs values from outside "
        f"it (new parameters or constants), and bryo_mox does not know how to pass extra "
        f"operands to `{name}`. Replace the whole equation instead, or rewrite outside it."
    )
