"""`make_mox`: trace a function with `jax.make_jaxpr` while backends report module calls.

Each intercepted call runs its module's pure function inside a `jax.jit` region with a
unique name (a marker), so that the call is one equation whose inputs are the module's
state leaves and the call's array arguments. After tracing, the jaxpr is converted to a
MoX tree: marker equations become `ModuleCall` nodes, everything else stays an equation.
Only public JAX APIs are used; no Trace or Tracer is subclassed.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
from jax.extend import core as jex

from bryo_pytree import is_array  # leaves traced as inputs of a region; the rest is static

from ._errors import MoxError
from ._hooks import interceptors
from ._ir import JIT_NAME, Block, Equation, ModuleCall, ModuleInfo, Mox, Var, jaxpr_params

_MARKER_PREFIX = "__bryo_mox_call_"
_counter = itertools.count()
_counter_lock = threading.Lock()


@dataclass(frozen=True)
class _Marker:
    info: ModuleInfo
    n_state: int
    n_state_out: int
    n_args: int


# Marker name -> what the region stands for. Entries are tiny and must outlive a trace:
# regions of higher-order equations keep their markers and are converted again later.
_MARKERS: dict[str, _Marker] = {}


@dataclass
class _Session:
    depth: int = 0
    restores: list[tuple[Callable[[Any], None], Any]] = field(default_factory=list)
    # id(calling module) -> its graph, for module paths (see `interception.module_path`)
    paths: dict[int, Any] = field(default_factory=dict)


_session: contextvars.ContextVar[_Session | None] = contextvars.ContextVar(
    "bryo_mox_session", default=None
)


def _new_marker() -> str:
    with _counter_lock:
        return f"{_MARKER_PREFIX}{next(_counter)}"


def new_marker(info: ModuleInfo, n_state: int, n_state_out: int, n_args: int) -> str:
    """A fresh marker name for a module call's `jit` region, recorded with what it stands for.

    For code that builds marked regions itself (`loads` builds jaxprs directly).
    """
    name = _new_marker()
    _MARKERS[name] = _Marker(info, n_state, n_state_out, n_args)
    return name


def call_region(
    info: ModuleInfo,
    fn: Callable[[list[Any], list[Any]], tuple[list[Any], list[Any]]],
    state_leaves: Sequence[Any],
    arg_leaves: Sequence[Any],
) -> tuple[list[Any], list[Any]]:
    """Run `fn(state_leaves, arg_leaves) -> (new_state_leaves, out_leaves)` as one region.

    The region is a `jax.jit` whose name is a fresh marker recorded with `info`; the
    conversion turns its equation into a `ModuleCall`.
    """
    name = _new_marker()
    counts: dict[str, int] = {}

    def region(state: list[Any], args: list[Any]) -> tuple[list[Any], list[Any]]:
        new_state, out = fn(state, args)
        counts["state_out"] = len(new_state)
        return list(new_state), list(out)

    region.__name__ = region.__qualname__ = name
    new_state, out = jax.jit(region)(list(state_leaves), list(arg_leaves))
    _MARKERS[name] = _Marker(info, len(state_leaves), counts["state_out"], len(arg_leaves))
    return new_state, out


def _split(leaves: Sequence[Any]) -> tuple[list[int], list[Any]]:
    positions = [i for i, x in enumerate(leaves) if is_array(x)]
    return positions, [leaves[i] for i in positions]


def _merge(leaves: Sequence[Any], positions: Sequence[int], values: Sequence[Any]) -> list[Any]:
    merged = list(leaves)
    for i, v in zip(positions, values, strict=True):
        merged[i] = v
    return merged


def _handle_call(
    info: ModuleInfo,
    state: Any,
    pure: Callable[..., tuple[Any, Any]],
    write_back: Callable[[Any], None],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> Any:
    """The handler given to interceptors: one module call becomes one marked region."""
    if not isinstance(info, ModuleInfo):
        raise MoxError(
            f"a backend passed `info` of type {type(info).__name__}; interceptors must pass "
            "a `bryo_mox.ModuleInfo`."
        )
    session = _session.get()
    state_leaves, state_def = jax.tree_util.tree_flatten(state)
    call_leaves, call_def = jax.tree_util.tree_flatten((tuple(args), dict(kwargs)))
    state_pos, state_dyn = _split(state_leaves)
    call_pos, call_dyn = _split(call_leaves)
    statics: dict[str, Any] = {}

    def fn(dyn_state: list[Any], dyn_args: list[Any]) -> tuple[list[Any], list[Any]]:
        inner_state = state_def.unflatten(_merge(state_leaves, state_pos, dyn_state))
        inner_args, inner_kwargs = call_def.unflatten(_merge(call_leaves, call_pos, dyn_args))
        new_state, out = pure(inner_state, *inner_args, **inner_kwargs)
        new_leaves, new_def = jax.tree_util.tree_flatten(new_state)
        out_leaves, out_def = jax.tree_util.tree_flatten(out)
        statics.update(new=(new_leaves, new_def), out=(out_leaves, out_def))
        return _split(new_leaves)[1], _split(out_leaves)[1]

    if session is not None and session.depth == 0:
        session.restores.append((write_back, state))
    if session is not None:
        session.depth += 1
    try:
        new_dyn, out_dyn = call_region(info, fn, state_dyn, call_dyn)
    finally:
        if session is not None:
            session.depth -= 1
    new_leaves, new_def = statics["new"]
    out_leaves, out_def = statics["out"]
    write_back(new_def.unflatten(_merge(new_leaves, _split(new_leaves)[0], new_dyn)))
    return out_def.unflatten(_merge(out_leaves, _split(out_leaves)[0], out_dyn))


@contextlib.contextmanager
def intercepting() -> Any:
    """Activate every backend's interceptor, routing module calls to `_handle_call`.

    On exit, modules called at the top level get their original state back.
    """
    session = _Session()
    token = _session.set(session)
    try:
        with contextlib.ExitStack() as stack:
            for interceptor in interceptors():
                stack.enter_context(interceptor(_handle_call))
            yield session
    finally:
        _session.reset(token)
        for write_back, state in reversed(session.restores):
            write_back(state)


def make_mox(fun: Callable[..., Any]) -> Callable[..., Mox]:
    """Trace `fun` into a module expression, like `jax.make_jaxpr` traces a jaxpr.

    Calls of modules of any installed backend become `module_call` nodes (type, name,
    static attributes; their parameters are inputs of the node); everything else is kept
    as jaxpr equations, higher-order ones (`jit`, `custom_jvp_call`, ...) as single nodes.

    Args:
        fun: the function to trace. Positional arguments are traced (their leaves must be
            arrays); so are keyword arguments holding arrays (Linen's
            `rngs={"dropout": key}`). Keyword arguments without arrays (`train=True`,
            `mutable=["batch_stats"]`) are static and baked into the expression.

    Returns:
        A function taking `fun`'s arguments (arrays or `jax.ShapeDtypeStruct`s) and
        returning a `Mox`.

    Example:
        >>> mox = make_mox(model)(x)          # doctest: +SKIP
        >>> print(mox)                        # doctest: +SKIP
        >>> y = eval_mox(mox, x)              # doctest: +SKIP
    """

    def trace(*args: Any, **kwargs: Any) -> Mox:
        traced_kwargs = {k: v for k, v in kwargs.items() if _holds_arrays(v)}
        static_kwargs = {k: v for k, v in kwargs.items() if k not in traced_kwargs}
        leaves, in_tree = jax.tree_util.tree_flatten(args)
        kw_leaves, kw_tree = jax.tree_util.tree_flatten(traced_kwargs)
        _check_leaves(leaves, in_tree, "args")
        _check_leaves(kw_leaves, kw_tree, "kwargs")
        n_args = len(leaves)
        out_store: dict[str, Any] = {}

        def flat_fun(*flat: Any) -> list[Any]:
            call_args = in_tree.unflatten(flat[:n_args])
            call_kwargs = kw_tree.unflatten(flat[n_args:])
            out = fun(*call_args, **call_kwargs, **static_kwargs)
            out_leaves, out_store["tree"] = jax.tree_util.tree_flatten(out)
            return out_leaves

        with intercepting():
            closed = jax.make_jaxpr(flat_fun)(*leaves, *kw_leaves)
        return Mox(
            convert_closed(closed),
            in_tree,
            out_store["tree"],
            kwargs_tree=kw_tree if traced_kwargs else None,
            static_kwargs=tuple(sorted(static_kwargs.items())),
        )

    return trace


def _holds_arrays(value: object) -> bool:
    """Whether a keyword argument is traced: some leaf of it is an array."""
    leaves = jax.tree_util.tree_leaves(value)
    return any(is_array(leaf) or isinstance(leaf, jax.ShapeDtypeStruct) for leaf in leaves)


def _check_leaves(leaves: Sequence[Any], tree: jax.tree_util.PyTreeDef, what: str) -> None:
    for index, leaf in enumerate(leaves):
        if not (is_array(leaf) or isinstance(leaf, (jax.ShapeDtypeStruct, int, float, bool))):
            paths = jax.tree_util.tree_flatten_with_path(tree.unflatten(leaves))[0]
            where = jax.tree_util.keystr(paths[index][0])
            raise MoxError(
                f"`{what}{where}` is a {type(leaf).__name__}, not an array: positional "
                "arguments of `make_mox(fun)(...)`, and keyword arguments holding arrays, are "
                "traced. Close over it, or pass it as a keyword argument without arrays to "
                "keep it static."
            )


def convert_closed(closed: jex.ClosedJaxpr) -> Block:
    """Convert a traced closed jaxpr into a MoX block (markers become module calls)."""
    return convert(closed.jaxpr, closed.consts)


def convert(jaxpr: jex.Jaxpr, consts: Sequence[Any] = ()) -> Block:
    """Convert an open jaxpr and its constants into a MoX block."""
    subst: dict[Var, Any] = {}

    def read(atom: Any) -> Any:
        return subst.get(atom, atom) if isinstance(atom, Var) else atom

    nodes = []
    for eqn in jaxpr.eqns:
        if not eqn.outvars and not eqn.effects:
            continue  # dead: a residue of partial evaluation (flax's nn.scan leaves some)
        invars = [read(a) for a in eqn.invars]
        if any(a is not b for a, b in zip(invars, eqn.invars, strict=False)):
            eqn = jex.new_jaxpr_eqn(
                invars,
                eqn.outvars,
                eqn.primitive,
                eqn.params,
                eqn.effects,
                eqn.source_info,
                eqn.ctx,
            )
        marker = _marker_of(eqn)
        if marker is None:
            regions = tuple(
                (key, index, _convert_any(value)) for key, index, value in jaxpr_params(eqn.params)
            )
            nodes.append(Equation(eqn, regions))
        else:
            nodes.append(_module_call(eqn, marker, subst))
    return Block(
        tuple(jaxpr.constvars),
        tuple(consts),
        tuple(jaxpr.invars),
        tuple(nodes),
        tuple(read(a) for a in jaxpr.outvars),
    )


def _convert_any(jaxpr: jex.ClosedJaxpr | jex.Jaxpr) -> Block:
    if isinstance(jaxpr, jex.ClosedJaxpr):
        return convert_closed(jaxpr)
    return convert(jaxpr)


def _marker_of(eqn: jex.JaxprEqn) -> _Marker | None:
    if eqn.primitive.name != JIT_NAME:
        return None
    name = eqn.params.get("name")
    return _MARKERS.get(name) if isinstance(name, str) else None


def _module_call(eqn: jex.JaxprEqn, marker: _Marker, subst: dict[Var, Any]) -> ModuleCall:
    """A module call from its marked region; state outputs that are unchanged inputs are
    pruned (the caller reads the input instead).

    Values the region closed over (`jax.jit` passes them as leading inputs: the new
    parameters `sub` threads into a module, say) count as state inputs of the module,
    after its own state: they are parameters the module's body now uses.
    """
    body = convert_closed(eqn.params["jaxpr"])
    n_closed = len(eqn.invars) - marker.n_state - marker.n_args
    if n_closed < 0:
        raise MoxError(
            f"module_call {marker.info.name!r} ({marker.info.type}) has {len(eqn.invars)} "
            f"inputs, fewer than its {marker.n_state} state leaves and {marker.n_args} arguments."
        )
    order = [
        *range(n_closed, n_closed + marker.n_state),
        *range(n_closed),
        *range(n_closed + marker.n_state, len(eqn.invars)),
    ]
    invars = tuple(eqn.invars[i] for i in order)
    body_invars = tuple(body.invars[i] for i in order)
    keep = []
    for i, (outer, inner) in enumerate(zip(eqn.outvars, body.outvars, strict=True)):
        forwarded = i < marker.n_state_out and isinstance(inner, Var) and inner in body_invars
        if forwarded:
            subst[outer] = invars[body_invars.index(inner)]
        else:
            keep.append(i)
    body = Block(
        body.constvars,
        body.consts,
        body_invars,
        body.nodes,
        tuple(body.outvars[i] for i in keep),
    )
    return ModuleCall(
        info=marker.info,
        invars=invars,
        outvars=tuple(eqn.outvars[i] for i in keep),
        body=body,
        n_state=marker.n_state + n_closed,
        n_state_out=sum(1 for i in keep if i < marker.n_state_out),
    )
