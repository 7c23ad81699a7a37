"""The two marker primitives that delimit a module call inside one trace.

`make_mox` traces the whole function once, with `jax.make_jaxpr`. Each intercepted module
call binds `mox_call_begin` on the module's state leaves (those that are variables of the
trace are recorded in its `CallMarker` instead) and the call's array arguments, runs the
module on the marker's outputs, and binds `mox_call_end` on the new state leaves
and the outputs. Both are identities. Their param `call` is one `CallMarker` object (what
the backend reported about the call), so the conversion finds each call's equations
between its two markers and groups them into a `ModuleCall` (see `_trace.convert`). A
call whose state leaves and arguments are all recorded binds no begin marker: `make_mox`
records where its equations start instead (`_trace.call_region`); if it also returns only
values its own equations computed, it binds no end marker either (where it ends is
recorded too, on jax 0.10 and later).

A marker costs one equation; the `jax.jit` region per call it replaces cost a nested trace.
Markers lower to nothing and are identities under `vmap`, `jvp` and transposition, so a
jaxpr that keeps them (a `scan` body, or a jitted function that jax traced while
`make_mox` ran and cached) still evaluates, differentiates and compiles unchanged. Tangents
and cotangents pass by unmarked: only primal values delimit calls.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import jax
from jax.extend import core as jex
from jax.interpreters import ad, batching, mlir

from ._compat import new_jaxpr_eqn
from ._ir import ModuleInfo


class CallMarker:
    """What one module call reported; compared and hashed by identity (one per call).

    Attributes:
        info: the backend's `ModuleInfo`.
        n_state: how many of the begin marker's operands are the module's state leaves
            (the rest are the call's array arguments).
        recorded: `None`, or one entry per state leaf of the module, in order: the jaxpr
            variable of a leaf that stayed out of the marker (`make_mox` records the
            leaves that are variables of its own trace instead of passing them through),
            `None` for a leaf that is one of the `n_state` operands, in turn.
        recorded_args: `None` (the call's array arguments are the begin marker's operands
            after the state), or the jaxpr variable of each argument: then the call has no
            begin marker at all (every state leaf was recorded too), and `make_mox` records
            where in the trace's equations the call starts instead (`_trace.call_region`).
    """

    __slots__ = ("info", "n_state", "recorded", "recorded_args")

    def __init__(
        self,
        info: ModuleInfo,
        n_state: int,
        recorded: tuple[jex.Var | None, ...] | None = None,
        recorded_args: tuple[jex.Var, ...] | None = None,
    ) -> None:
        self.info = info
        self.n_state = n_state
        self.recorded = recorded
        self.recorded_args = recorded_args

    def __repr__(self) -> str:
        return f"{self.info.short_type}({self.info.name!r})"


begin_p = jex.Primitive("mox_call_begin")
"""`begin(*state, *args, call=CallMarker) -> (*state, *args)`: a module call starts."""
end_p = jex.Primitive("mox_call_end")
"""`end(*new_state, *outs, call=CallMarker, n_state_out=int)`: the call returns."""


def _identity(*args: Any, **params: Any) -> list[Any]:
    return list(args)


def _lower(ctx: Any, *args: Any, **params: Any) -> Sequence[Any]:
    return list(args)


def _register(prim: jex.Primitive) -> None:
    prim.multiple_results = True
    prim.def_impl(_identity)
    prim.def_abstract_eval(_identity)
    mlir.register_lowering(prim, _lower)

    def jvp(primals: Sequence[Any], tangents: Sequence[Any], **params: Any) -> Any:
        return prim.bind(*primals, **params), list(tangents)

    def batch(args: Sequence[Any], dims: Sequence[Any], **params: Any) -> Any:
        return prim.bind(*args, **params), list(dims)

    def transpose(cotangents: Sequence[Any], *args: Any, **params: Any) -> list[Any]:
        return [
            ct if ad.is_undefined_primal(x) else None
            for ct, x in zip(cotangents, args, strict=True)
        ]

    ad.primitive_jvps[prim] = jvp
    ad.primitive_transposes[prim] = transpose
    batching.primitive_batchers[prim] = batch


_register(begin_p)
_register(end_p)


def marker_equation(
    prim: jex.Primitive, operands: Sequence[Any], params: Mapping[str, Any]
) -> tuple[jex.JaxprEqn, list[jex.Var]]:
    """A marker equation on `operands` and its fresh output variables, for code that
    builds jaxprs directly (`loads`): `begin_p` with `{"call": CallMarker(...)}`, `end_p`
    with `{"call": ..., "n_state_out": k}`."""
    template = _template()
    outvars = [jex.Var(atom.aval) for atom in operands]
    eqn = new_jaxpr_eqn(
        list(operands),
        outvars,
        prim,
        dict(params),
        template.effects,
        template.source_info,
        template.ctx,
    )
    return eqn, outvars


@functools.cache
def _template() -> jex.JaxprEqn:
    """A traced marker equation, whose source info and context built ones copy."""
    marker = CallMarker(ModuleInfo("bryo_mox.template"), 0)
    (eqn,) = jax.make_jaxpr(lambda x: begin_p.bind(x, call=marker))(0.0).jaxpr.eqns
    return eqn
