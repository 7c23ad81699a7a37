"""Custom derivative rules as data: written as regions, rebuilt with `jax.custom_jvp/vjp`.

A traced `custom_jvp_call` keeps its rule as an opaque function, which a file cannot hold.
To serialize it we trace the rule through public APIs (`jax.jvp` / `jax.vjp` of the
equation, which run the custom rule) into a `jvp` region: `(*primals, *tangents) ->
tangents_out` (or a `vjp` region: `(*primals, *cotangents) -> input cotangents`).
Loading wraps the primal region and that rule region back into `jax.custom_jvp` or
`jax.custom_vjp`, so derivatives still follow the custom rule (relu'(0) = 0).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.extend import core as jex

from ._errors import MoxSerializationError
from ._eval import eval_equation
from ._ir import CUSTOM_DERIVATIVE_NAMES, Block, Equation, ModuleCall, Node, Var


def _sds(aval: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)


def differentiable(dtype: Any) -> bool:
    return jax.numpy.issubdtype(dtype, jax.numpy.inexact)


def derivative_rule_region(node: Equation) -> tuple[str, Block]:
    """The rule of a custom derivative equation as a region: `("jvp" | "vjp", block)`."""
    from ._trace import convert_closed

    eqn = node.eqn
    in_avals = [v.aval for v in eqn.invars]
    out_avals = [v.aval for v in eqn.outvars]
    diff = [differentiable(a.dtype) for a in in_avals]
    if not all(differentiable(a.dtype) for a in out_avals):
        raise MoxSerializationError(
            f"equation {eqn.primitive.name} {node.name!r} has non-float outputs; its custom "
            "derivative rule cannot be written."
        )
    primal = lambda *p: eval_equation(eqn, list(p))
    n = len(in_avals)
    if eqn.primitive.name == "custom_jvp_call":
        key = "jvp"

        def rule(*xs: Any) -> list[Any]:
            tangents = iter(xs[n:])
            full = [
                next(tangents) if d else np.zeros(a.shape, jax.dtypes.float0)
                for a, d in zip(in_avals, diff, strict=False)
            ]
            return list(jax.jvp(primal, tuple(xs[:n]), tuple(full))[1])

        extra = [a for a, d in zip(in_avals, diff, strict=False) if d]
    else:
        key = "vjp"

        def rule(*xs: Any) -> list[Any]:
            _, pullback = jax.vjp(primal, *xs[:n])
            grads = pullback(list(xs[n:]))
            return [g for g, d in zip(grads, diff, strict=False) if d]

        extra = out_avals
    avals = [_sds(a) for a in [*in_avals, *extra]]
    traced = convert_closed(jax.make_jaxpr(rule)(*avals))
    # The traced rule may call the custom function itself (for its primal output);
    # inline those calls so that writing the rule does not recurse forever.
    return key, inline_calls(traced)


def inline_calls(block: Block) -> Block:
    """`block` with its custom derivative equations and module calls replaced by their
    bodies, recursively, as `eval_block(block, ..., inline_custom=True)` evaluates it:
    the same computation without re-tracing it. Inlined equations get fresh variables."""
    constvars: list[Var] = []
    consts: list[Any] = []
    nodes: list[Node] = []

    def splice(inner: Block, args: Sequence[Any]) -> list[Any]:
        sub: dict[Var, Any] = dict(zip(inner.invars, args, strict=True))
        for var, value in zip(inner.constvars, inner.consts, strict=True):
            sub[var] = jex.Var(var.aval)
            constvars.append(sub[var])
            consts.append(value)
        read = lambda atom: sub.get(atom, atom) if isinstance(atom, Var) else atom
        for node in inner.nodes:
            ins = [read(a) for a in node.invars]
            if isinstance(node, ModuleCall):
                outs = splice(node.body, ins)
            elif node.primitive.name in CUSTOM_DERIVATIVE_NAMES:
                (body,) = [region for key, _, region in node.regions if key == "call_jaxpr"]
                outs = splice(body, ins)
            else:
                eqn = node.eqn
                outs = [type(v)(v.aval) for v in eqn.outvars]  # a Var or a DropVar
                new = jex.new_jaxpr_eqn(
                    ins, outs, eqn.primitive, eqn.params, eqn.effects, eqn.source_info, eqn.ctx
                )
                nodes.append(Equation(new, node.regions))
            sub.update(zip(node.outvars, outs, strict=True))
        return [read(a) for a in inner.outvars]

    outvars = splice(block, block.invars)
    return Block(tuple(constvars), tuple(consts), block.invars, tuple(nodes), tuple(outvars))


def rebuild_custom(
    kind: str,
    name: str,
    primal: Callable[..., Sequence[Any]],
    rule: Callable[..., Sequence[Any]],
    in_avals: Sequence[Any],
) -> Callable[..., list[Any]]:
    """A function with the custom derivative `rule` around `primal` (as `rebuild` reads).

    `primal(*xs) -> outs`; for `kind="custom_jvp_call"`, `rule(*primals, *float_tangents)
    -> tangents_out`; for `"custom_vjp_call"`, `rule(*primals, *cotangents) ->
    float_input_cotangents`.
    """
    diff = [differentiable(a.dtype) for a in in_avals]

    def fun(*xs: Any) -> tuple[Any, ...]:
        return tuple(primal(*xs))

    fun.__name__ = fun.__qualname__ = name
    if kind == "custom_jvp_call":
        wrapped = jax.custom_jvp(fun)

        def jvp(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> Any:
            float_tangents = [t for t, d in zip(tangents, diff, strict=False) if d]
            return fun(*primals), tuple(rule(*primals, *float_tangents))

        wrapped.defjvp(jvp)
    elif kind == "custom_vjp_call":
        wrapped = jax.custom_vjp(fun)

        def fwd(*xs: Any) -> Any:
            return fun(*xs), xs

        def bwd(res: tuple[Any, ...], cts: tuple[Any, ...]) -> tuple[Any, ...]:
            grads = iter(rule(*res, *cts))
            return tuple(next(grads) if d else None for d in diff)

        wrapped.defvjp(fwd, bwd)
    else:
        raise MoxSerializationError(f"`{kind}` is not a custom derivative primitive.")
    return lambda *xs: list(wrapped(*xs))
