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
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.extend import core as jex

from ._compat import new_jaxpr_eqn
from ._errors import MoxSerializationError
from ._eval import eval_equation
from ._ir import CUSTOM_DERIVATIVE_NAMES, Atom, Block, Equation, ModuleCall, Var, array_aval


def _sds(aval: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)


def differentiable(dtype: Any) -> bool:
    return jax.numpy.issubdtype(dtype, jax.numpy.inexact)


class _Rule(NamedTuple):
    """How to trace one equation's rule: `fun(*avals) -> outputs`, written as `key`."""

    key: str
    fun: Callable[..., list[Any]]
    avals: list[jax.ShapeDtypeStruct]


def _rule(node: Equation) -> _Rule:
    eqn = node.eqn
    in_avals = [array_aval(v) for v in eqn.invars]
    out_avals = [array_aval(v) for v in eqn.outvars]
    diff = [differentiable(a.dtype) for a in in_avals]
    if not all(differentiable(a.dtype) for a in out_avals):
        raise MoxSerializationError(
            f"equation {eqn.primitive.name} {node.name!r} has non-float outputs; its custom "
            "derivative rule cannot be written."
        )
    primal = lambda *p: eval_equation(node, list(p))
    n = len(in_avals)
    if eqn.primitive.name == "custom_jvp_call":

        def jvp(*xs: Any) -> list[Any]:
            tangents = iter(xs[n:])
            full = [
                next(tangents) if d else np.zeros(a.shape, jax.dtypes.float0)
                for a, d in zip(in_avals, diff, strict=False)
            ]
            return list(jax.jvp(primal, tuple(xs[:n]), tuple(full))[1])

        extra = [a for a, d in zip(in_avals, diff, strict=False) if d]
        return _Rule("jvp", jvp, [_sds(a) for a in [*in_avals, *extra]])

    def vjp(*xs: Any) -> list[Any]:
        _, pullback = jax.vjp(primal, *xs[:n])
        grads = pullback(list(xs[n:]))
        return [g for g, d in zip(grads, diff, strict=False) if d]

    return _Rule("vjp", vjp, [_sds(a) for a in [*in_avals, *out_avals]])


def derivative_rule_region(node: Equation) -> tuple[str, Block]:
    """The rule of a custom derivative equation as a region: `("jvp" | "vjp", block)`."""
    return derivative_rule_regions([node])[0]


def derivative_rule_regions(nodes: Sequence[Equation]) -> list[tuple[str, Block]]:
    """The rules of several custom derivative equations, as `derivative_rule_region`.

    They are traced together, in one `jax.make_jaxpr` (whose fixed cost is most of a
    small rule's), and the traced block is split into one region per rule: each rule
    reads only its own inputs. If the joint trace fails, each rule is traced alone, so
    that the error names its equation.
    """
    from ._trace import convert_closed

    rules = [_rule(node) for node in nodes]
    if len(rules) > 1:
        try:
            return _traced_together(rules)
        except Exception:  # traced one by one below, for an error naming the equation
            pass
    regions = []
    for rule in rules:
        traced = convert_closed(jax.make_jaxpr(rule.fun)(*rule.avals))
        # The traced rule may call the custom function itself (for its primal output);
        # inline those calls so that writing the rule does not recurse forever, and keep
        # only what computes the rule's outputs: a loaded rule's jvp computes the primal
        # output too, which written again would grow the file at every save.
        inlined = inline_calls(traced)
        regions.append((rule.key, _slice(inlined, inlined.invars, inlined.outvars)))
    return regions


def _traced_together(rules: Sequence[_Rule]) -> list[tuple[str, Block]]:
    from ._trace import convert_closed

    n_outs: list[int] = []

    def together(*xs: Any) -> list[Any]:
        outs: list[Any] = []
        start = 0
        n_outs.clear()
        for rule in rules:
            out = rule.fun(*xs[start : start + len(rule.avals)])
            start += len(rule.avals)
            n_outs.append(len(out))
            outs.extend(out)
        return outs

    traced = inline_calls(
        convert_closed(jax.make_jaxpr(together)(*[a for r in rules for a in r.avals]))
    )
    regions = []
    in_start = out_start = 0
    for rule, n_out in zip(rules, n_outs, strict=True):
        invars = traced.invars[in_start : in_start + len(rule.avals)]
        outvars = traced.outvars[out_start : out_start + n_out]
        regions.append((rule.key, _slice(traced, invars, outvars)))
        in_start += len(rule.avals)
        out_start += n_out
    return regions


def _slice(block: Block, invars: Sequence[Var], outvars: Sequence[Any]) -> Block:
    """The part of `block` that computes `outvars` from `invars` (and constants), with
    every equation that has effects."""
    needed = {v for v in outvars if isinstance(v, Var)}
    kept: list[ModuleCall | Equation] = []
    for node in reversed(block.nodes):
        effects = isinstance(node, Equation) and node.eqn.effects
        if effects or any(v in needed for v in node.outvars if isinstance(v, Var)):
            kept.append(node)
            needed.update(a for a in node.invars if isinstance(a, Var))
    consts = [(v, c) for v, c in zip(block.constvars, block.consts, strict=True) if v in needed]
    return Block(
        tuple(v for v, _ in consts),
        tuple(c for _, c in consts),
        tuple(invars),
        tuple(reversed(kept)),
        tuple(outvars),
    )


def inline_calls(block: Block) -> Block:
    """`block` with its custom derivative equations and module calls replaced by their
    bodies, recursively (the primal computation of each custom derivative equation):
    the same computation without re-tracing it. Inlined equations get fresh variables."""
    constvars: list[Var] = []
    consts: list[Any] = []
    nodes: list[ModuleCall | Equation] = []

    def splice(inner: Block, args: Sequence[Any]) -> list[Any]:
        sub: dict[Atom, Any] = dict(zip(inner.invars, args, strict=True))
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
                (body,) = [r.block for r in node.regions if r.param == "call_jaxpr"]
                outs = splice(body, ins)
            else:
                eqn = node.eqn
                outs = [type(v)(v.aval) for v in eqn.outvars]  # a Var or a DropVar
                new = new_jaxpr_eqn(
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
