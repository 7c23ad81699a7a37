"""`make_mox`: trace a function once with `jax.make_jaxpr` while backends report module calls.

Each intercepted call is delimited by two marker equations (`_markers`): the begin marker
takes the call's array arguments, and the module's state leaves except those that are
variables of `make_mox`'s own trace (it records those: `call_region`); the module runs on
its outputs and the recorded leaves, the end marker takes the new state leaves and the
outputs. A call whose state leaves and arguments are all variables of that trace binds
no begin marker: it records them, and its start as the number of equations the trace
holds then (`_Recording.starts`). The whole function is one trace, as `jax.make_jaxpr`
makes it. The conversion (`convert`) then reads the jaxpr once, in order, and groups the
equations between each call's start (or begin marker) and its end marker into a
`ModuleCall` node; everything else stays an equation. Only public JAX APIs are used,
besides three private attributes, each read with a default: a tracer's `_trace` and
`val` (its trace and jaxpr variable), to record leaves (a JAX without them passes every
leaf through the marker), and the trace's equation list `frame.tracing_eqns` (jax 0.7.2
to 0.10), for starts (a JAX without it binds begin markers). The starts are checked
against the jaxpr jax returns, equation by equation (`_Positions`); a recording the
jaxpr does not match makes `make_mox` trace once more with markers only. No Trace or
Tracer is subclassed.

Conversion details, all in one pass with explicit stacks (no recursion, so models of any
depth convert):

- A module body's inputs are its state leaves (its begin marker's outputs, and a fresh
  input for each variable the marker recorded, whose readers in the body are rewritten
  to read it), then the arguments. A value the body uses without receiving it through
  the marker (a new parameter `sub` threads in, a traced value the module closed over)
  becomes one more state input, after the module's own state; an array constant becomes
  a constant of the innermost block that uses it.
- A state output that is an unchanged state input is pruned: later readers use the input.
- A call whose values escape it other than through its end marker (residuals of `grad`
  taken inside the traced function) or whose markers do not pair up (partial evaluation
  dropped one) is dissolved: its equations join the enclosing block.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import operator
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax
from jax.extend import core as jex

from bryo_pytree import is_array  # leaves traced as inputs of a call; the rest is static

from ._collector import collector_paused
from ._compat import DropVar, find_top_trace, new_jaxpr_eqn
from ._errors import MoxError
from ._hooks import (
    INFO_CONTRACT,
    PURE_CONTRACT,
    WRITE_BACK_CONTRACT,
    check_interceptors_for,
    enter_interceptors,
    handler_error,
)
from ._ir import (
    Block,
    Equation,
    Literal,
    ModuleCall,
    ModuleInfo,
    Mox,
    Region,
    Var,
    jaxpr_params,
    new_equation,
)
from ._markers import CallMarker, begin_p, end_p


class _Recording(NamedTuple):
    """The trace `make_mox` started (`jax.make_jaxpr`'s) and the class of its tracers: a
    module call in that trace records its state leaves that are variables of it instead of
    passing them through its begin marker (see `call_region`).

    `eqns` is the list that trace appends its equations to (`None` where this jax's trace
    has none to read), and `starts` gets `(len(eqns), marker)` for each call that binds no
    begin marker: the position of its first equation in the jaxpr (checked against the
    jaxpr by `_Positions`). `ends` gets an `_End` for each such call that binds no end
    marker either (`None`: calls end with markers)."""

    trace: Any
    tracer_class: type
    eqns: list[Any] | None = None
    starts: list[tuple[int, CallMarker]] | None = None
    ends: list[_End] | None = None


class _End(NamedTuple):
    """A module call that ended without an end marker (`call_region`): where (the number
    of equations traced when it returned), which call, the variables its body returned
    (its changed state leaves, then its outputs; each defined by an equation of the
    body), and how many are state."""

    position: int
    marker: CallMarker
    outvars: tuple[Any, ...]
    n_state_out: int


#: Whether calls may end without an end marker: where jax keeps a variable for an output
#: nothing reads (jax 0.10 on; 0.7 to 0.9 put a `DropVar` there, and a call's output
#: would then name no variable of the jaxpr).
ENDS_BY_POSITION = jax.__version_info__ >= (0, 10)


def _tracing_eqns(trace: Any) -> list[Any] | None:
    """The list `trace` (a `jax.make_jaxpr` trace) appends its equations to, one entry per
    bound equation, in order: `trace.frame.tracing_eqns`, private to jax (jax 0.7.2 to
    0.10 at least); `None` where a jax has no such list (calls then bind begin markers)."""
    found = getattr(getattr(trace, "frame", None), "tracing_eqns", None)
    return found if found.__class__ is list else None


class _Positions(NamedTuple):
    """What the equations of a trace were when its function returned, to check that the
    jaxpr jax made holds them in the same places (`matches`): the positions `starts`
    record are then the jaxpr's. The outputs of each equation, by identity."""

    starts: list[tuple[int, CallMarker]]
    ends: list[_End]
    lengths: list[int]  # of each equation's outputs
    outvars: list[Any]  # every equation's outputs, in order

    @classmethod
    def of(cls, recording: _Recording) -> _Positions | None:
        """The equations `recording`'s trace holds now; `None` if some entry is not one
        (a jax that keeps them otherwise)."""
        assert recording.eqns is not None and recording.starts is not None
        lengths, outvars = [], []
        for entry in recording.eqns:  # (jax 0.7 keeps a function returning the equation)
            eqn = entry() if callable(entry) else entry
            found = getattr(eqn, "outvars", None)
            if found is None:
                return None
            lengths.append(len(found))
            outvars.extend(found)
        return cls(recording.starts, recording.ends or [], lengths, outvars)

    def matches(self, jaxpr: jex.Jaxpr) -> bool:
        """Whether `jaxpr` begins with these equations, in this order (an output nothing
        reads may have become a `DropVar`, as jax 0.7 to 0.9 make them)."""
        eqns = jaxpr.eqns[: len(self.lengths)]
        if len(eqns) != len(self.lengths):
            return False
        outs = [e.outvars for e in eqns]
        if list(map(len, outs)) != self.lengths:
            return False
        found = list(itertools.chain.from_iterable(outs))
        if len(found) != len(self.outvars):
            return False
        if all(map(operator.is_, found, self.outvars)):
            return True
        if self.ends:  # a call's output must be the very variable its body defined
            return False
        pairs = zip(found, self.outvars, strict=True)
        return all(a is b or a.__class__ is DropVar for a, b in pairs)


@dataclass
class _Session:
    depth: int = 0
    #: (write_back, original state, plugin, module call) of each call at the top level
    restores: list[tuple[Callable[[Any], None], Any, str | None, ModuleInfo]] = field(
        default_factory=list
    )
    # id(calling module) -> its graph, for module paths (see `interception.module_path`)
    paths: dict[int, Any] = field(default_factory=dict)
    recording: _Recording | None = None


_session: contextvars.ContextVar[_Session | None] = contextvars.ContextVar(
    "bryo_mox_session", default=None
)

#: Held while `make_mox` traces, and while `eval_mox` reads its arguments. Backends write a
#: call's traced state into the caller's modules until the trace ends (as the call itself
#: would update them), so two traces of one model in two threads would read each other's
#: tracers, and restore them for good: traces take turns instead (tracing holds Python's
#: GIL anyway). Re-entrant: a traced function may trace and evaluate again.
TRACING = threading.RLock()
#: While tracing, Python may nest `TRACE_RECURSION_FACTOR` times as many frames as
#: `sys.getrecursionlimit()` allows, up to `TRACE_RECURSION_CAP` (where a thread's 8 MB
#: C stack stays safe): a traced module call nests about 8 frames (the backend's routing,
#: the handler, the pure call) where the call itself nests 1 or 2, so that any model that
#: can be called can be traced (a 1,000-deep one at Python's default limit too).
TRACE_RECURSION_FACTOR = 10
TRACE_RECURSION_CAP = 20_000


def current_session() -> _Session | None:
    """The tracing session of the running `make_mox`, if any (per-trace caches live there)."""
    return _session.get()


def call_region(
    info: ModuleInfo,
    fn: Callable[[list[Any], list[Any]], tuple[Sequence[Any], Sequence[Any]]],
    state_leaves: Sequence[Any],
    arg_leaves: Sequence[Any],
    recording: _Recording | None = None,
) -> tuple[list[Any], list[Any]]:
    """Run `fn(state_leaves, arg_leaves) -> (new_state_leaves, out_leaves)` as one module call.

    The call is delimited by a begin and an end marker sharing one `CallMarker(info)`;
    the conversion turns what lies between them into a `ModuleCall`. A state leaf `fn`
    returns unchanged does not go through the end marker: the caller keeps its own value
    (so the call has only the state outputs it changed).

    With `recording` (`make_mox`'s own trace), while that trace is the current one, a
    state leaf that is one of its variables stays out of the begin marker: `fn` gets the
    leaf itself, and the marker records its variable (`CallMarker.recorded`); the
    conversion gives the body a fresh input for it all the same. A marker operand costs
    a tracer, and the module its Variables rewritten and restored, at every level of
    nesting the leaf passes; a recorded variable costs a list entry. The other leaves
    (concrete arrays, another trace's tracers) go through the marker. When every state
    leaf and every argument is recorded (`CallMarker.recorded_args`; no two of them one
    variable), no begin marker is bound at all: the call's start is the position of its
    first equation (`recording.starts`): a bind costs as much as any equation of the
    trace (JAX's fixed price per bind, about 90,000 instructions on jax 0.10). Such a
    call that returns only distinct values its own equations computed binds no end
    marker either (`_end_recorded`): its end is a position too (`recording.ends`).
    """
    recorded, operands, recorded_args = None, state_leaves, None
    if recording is not None and find_top_trace(()) is recording.trace:
        if state_leaves:
            recorded, operands = _record(state_leaves, recording)
        if not operands and recording.starts is not None:
            recorded_args = _record_args(arg_leaves, recording, recorded)
    n_state = len(operands)
    marker = CallMarker(info, n_state, recorded, recorded_args)
    start = -1  # the call's position where it binds no begin marker
    if recorded_args is not None:  # every input recorded: no begin marker, a position
        assert recording is not None and recording.eqns is not None and recording.starts is not None
        start = len(recording.eqns)
        recording.starts.append((start, marker))
        ins = arg_leaves
    else:
        ins = begin_p.bind(*operands, *arg_leaves, call=marker)
    if recorded is None:
        body_state = ins[:n_state]
    else:  # the recorded leaves as they are, the marker's outputs for the others
        passed = iter(ins[:n_state])
        body_state = [
            leaf if var is not None else next(passed)
            for leaf, var in zip(state_leaves, recorded, strict=True)
        ]
    new_state, out = fn(list(body_state), list(ins[n_state:]))
    if len(new_state) == len(body_state) and all(map(operator.is_, new_state, body_state)):
        if start < 0 or not _end_recorded(recording, start, marker, (), out):  # type: ignore[arg-type]  # a start implies a recording
            out = end_p.bind(*out, call=marker, n_state_out=0)  # (no state changed)
        return list(state_leaves), list(out)
    position = {id(leaf): j for j, leaf in enumerate(body_state)}
    unchanged = [position.get(id(leaf)) for leaf in new_state]
    changed = [leaf for leaf, j in zip(new_state, unchanged, strict=True) if j is None]
    if start >= 0 and _end_recorded(recording, start, marker, changed, out):  # type: ignore[arg-type]  # a start implies a recording
        outs = [*changed, *out]
    else:
        outs = end_p.bind(*changed, *out, call=marker, n_state_out=len(changed))
    changed_outs = iter(outs[: len(changed)])
    final = [state_leaves[j] if j is not None else next(changed_outs) for j in unchanged]
    return final, list(outs[len(changed) :])


def _end_recorded(
    recording: _Recording,
    start: int,
    marker: CallMarker,
    changed: Sequence[Any],
    out: Sequence[Any],
) -> bool:
    """End the call that started at position `start` without an end marker, if the values
    it returns (`changed` state leaves, then `out`) are distinct variables of
    `recording`'s trace that equations of its body define: the caller then reads those
    variables themselves, and the conversion gives the call fresh outputs in their place,
    as an end marker's would be. Records the end (`recording.ends`) and returns True; else
    False, and the call binds an end marker (for a value it returns twice, or unchanged,
    or computed before it started, which only a marker tells apart from the call's own)."""
    ends, eqns = recording.ends, recording.eqns
    if ends is None or eqns is None:
        return False
    trace, tracer_class = recording.trace, recording.tracer_class
    outvars = []
    for leaf in (*changed, *out):
        if leaf.__class__ is not tracer_class or getattr(leaf, "_trace", None) is not trace:
            return False
        var = getattr(leaf, "val", None)
        if var.__class__ is not Var:
            return False
        outvars.append(var)
    missing = set(outvars)
    if len(missing) != len(outvars):
        return False
    position = i = len(eqns)
    while missing and i > start:  # (the body's last equations define most outputs)
        i -= 1
        missing.difference_update(getattr(eqns[i], "outvars", ()))
    if missing:
        return False
    ends.append(_End(position, marker, tuple(outvars), len(changed)))
    return True


def _record(
    leaves: Sequence[Any], recording: _Recording
) -> tuple[tuple[Any, ...] | None, Sequence[Any]]:
    """`(recorded, operands)`: each leaf's variable in `recording`'s trace, or `None`
    where the leaf must be a marker operand (it is not a variable of that trace, or its
    variable came earlier in `leaves`); `(None, leaves)` when no leaf is recorded."""
    trace, tracer_class = recording.trace, recording.tracer_class
    recorded: list[Any] = []
    operands: list[Any] = []
    seen: set[Any] = set()
    for leaf in leaves:
        # (private attributes of JAX's tracer: read with defaults, so that a JAX that
        # renames them costs the recording, never the trace)
        if leaf.__class__ is tracer_class and getattr(leaf, "_trace", None) is trace:
            var = getattr(leaf, "val", None)
            if var.__class__ is Var and var not in seen:
                seen.add(var)
                recorded.append(var)
                continue
        recorded.append(None)
        operands.append(leaf)
    if not seen:
        return None, leaves
    return tuple(recorded), operands


def _record_args(
    leaves: Sequence[Any], recording: _Recording, recorded: tuple[Any, ...] | None
) -> tuple[Any, ...] | None:
    """The variable of each argument leaf in `recording`'s trace, if every one is a
    variable of it, and none is another argument's or a recorded state leaf's (a body
    telling two inputs apart reads two marker outputs); else `None`."""
    trace, tracer_class = recording.trace, recording.tracer_class
    seen = set(recorded) if recorded is not None else set()
    found = []
    for leaf in leaves:
        if leaf.__class__ is not tracer_class or getattr(leaf, "_trace", None) is not trace:
            return None
        var = getattr(leaf, "val", None)
        if var.__class__ is not Var or var in seen:
            return None
        seen.add(var)
        found.append(var)
    return tuple(found)


#: `is_array` by class (it depends on the class only: `isinstance` of a tracer against
#: `jax.Array` costs ~1 us, a dict lookup ~50 ns); cleared when it grows past a bound.
_array_classes: dict[type, bool] = {}


def _is_array(value: object) -> bool:
    flag = _array_classes.get(value.__class__)
    if flag is None:
        if len(_array_classes) > 256:
            _array_classes.clear()
        flag = _array_classes[value.__class__] = is_array(value)
    return flag


_class_of = operator.attrgetter("__class__")


def _all_arrays(values: Sequence[Any]) -> bool:
    """Whether every value is an array (`_is_array`), asked once per class among them."""
    get = _array_classes.get
    for cls in set(map(_class_of, values)):
        flag = get(cls)
        if flag is None:  # (a class not seen yet)
            return all(map(_is_array, values))
        if not flag:
            return False
    return True


def _split(leaves: Sequence[Any]) -> tuple[list[int] | None, list[Any]]:
    """The array leaves, and their positions (`None`: all leaves are arrays)."""
    flags = list(map(_is_array, leaves))
    if all(flags):
        return None, list(leaves)
    positions = [i for i, flag in enumerate(flags) if flag]
    return positions, [leaves[i] for i in positions]


def _merge(
    leaves: Sequence[Any], positions: Sequence[int] | None, values: Sequence[Any]
) -> Sequence[Any]:
    if positions is None:
        return values
    merged = list(leaves)
    for i, v in zip(positions, values, strict=True):
        merged[i] = v
    return merged


class _Flat(NamedTuple):
    """A value flattened: its leaves, its tree, and which leaves are the arrays that go
    through a marker. The common values (a list of arrays: a backend's state; one array:
    a call's result) skip JAX's flattening: `treedef` is then `_LIST` or `_ONE`."""

    leaves: Sequence[Any]
    treedef: Any
    positions: list[int] | None  # of the arrays among the leaves; `None`: all leaves
    arrays: list[Any]

    @classmethod
    def of(cls, value: Any) -> _Flat:
        if value.__class__ is list and _all_arrays(value):
            return cls(value, _LIST, None, value)
        if _is_array(value):
            return cls((value,), _ONE, None, [value])
        leaves, treedef = jax.tree_util.tree_flatten(value)
        positions, arrays = _split(leaves)
        return cls(leaves, treedef, positions, arrays)

    @classmethod
    def of_call(cls, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> _Flat:
        """`(args, kwargs)` flattened; `treedef` is `_ARGS` for positional arrays only."""
        if not kwargs and _all_arrays(args):
            return cls(args, _ARGS, None, list(args))
        leaves, treedef = jax.tree_util.tree_flatten((tuple(args), dict(kwargs)))
        positions, arrays = _split(leaves)
        return cls(leaves, treedef, positions, arrays)

    def rebuild(self, arrays: Sequence[Any]) -> Any:
        """The value with `arrays` in place of its array leaves."""
        treedef = self.treedef
        if treedef is _LIST:
            return list(arrays)
        if treedef is _ONE:
            return arrays[0]
        if treedef is _ARGS:
            return tuple(arrays), {}
        return treedef.unflatten(_merge(self.leaves, self.positions, arrays))


_LIST, _ONE, _ARGS = object(), object(), object()  # `_Flat.treedef`s of the fast paths


def _handle_call(
    info: ModuleInfo,
    state: Any,
    pure: Callable[..., tuple[Any, Any]],
    write_back: Callable[[Any], None],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    plugin: str | None = None,
    interceptor: object = None,
) -> Any:
    """The handler given to interceptors: one module call becomes one marked call.
    `plugin` and `interceptor` name the backend when what it passes misbehaves (each
    interceptor gets its own `PluginHandler`)."""
    if info.__class__ is not ModuleInfo and not isinstance(info, ModuleInfo):
        did, where = f"passed `info` of type {type(info).__name__}", "to `make_mox`'s handler"
        raise handler_error(plugin, interceptor, _ROUTE, INFO_CONTRACT, did=did, where=where)
    session = _session.get()
    given_state, given_call = _Flat.of(state), _Flat.of_call(args, kwargs)
    statics: list[_Flat] = []

    def fn(dyn_state: list[Any], dyn_args: list[Any]) -> tuple[list[Any], list[Any]]:
        inner_args, inner_kwargs = given_call.rebuild(dyn_args)
        answer = pure(given_state.rebuild(dyn_state), *inner_args, **inner_kwargs)
        if not (isinstance(answer, tuple) and len(answer) == 2):
            returned = f"{type(answer).__name__}, not a pair `(new_state, out)`"
            where = f"for the module call {info.name or info.type!r}"
            raise handler_error(
                plugin, pure, "the `pure` function", PURE_CONTRACT, returned=returned, where=where
            )
        new_state, out = answer
        statics.append(new := _Flat.of(new_state))
        statics.append(result := _Flat.of(out))
        return new.arrays, result.arrays

    if session is not None:
        if session.depth == 0:
            session.restores.append((write_back, state, plugin, info))
        session.depth += 1
    try:
        new_dyn, out_dyn = call_region(
            info,
            fn,
            given_state.arrays,
            given_call.arrays,
            session.recording if session is not None else None,
        )
    finally:
        if session is not None:
            session.depth -= 1
    new, out = statics
    rebuilt = new.rebuild(new_dyn)
    try:
        write_back(rebuilt)
    except (MoxError, RecursionError):  # (a backend's own message to the user)
        raise
    except Exception as error:
        where = f"for the module call {info.name or info.type!r}"
        role, contract = "the `write_back` function", WRITE_BACK_CONTRACT
        raise handler_error(plugin, write_back, role, contract, where=where, error=error) from error
    return out.rebuild(out_dyn)


_ROUTE = "the interceptor (its module-call route)"


@contextlib.contextmanager
def intercepting() -> Any:
    """Activate every backend's interceptor, routing module calls to `_handle_call`.

    On exit, modules called at the top level get their original state back.
    """
    session = _Session()
    token = _session.set(session)
    try:
        with contextlib.ExitStack() as stack:
            enter_interceptors(stack, _handle_call)
            yield session
    finally:
        _session.reset(token)
        _restore(session.restores, sys.exc_info()[1])


def _restore(
    restores: list[tuple[Callable[[Any], None], Any, str | None, ModuleInfo]],
    raising: BaseException | None,
) -> None:
    """Give each module called at the top level its original state back, every one even
    if some `write_back` fails (none keeps the trace's values). A failure is named (see
    `handler_error`); while the trace is raising `raising`, it is a note on that error
    instead, which stays the one raised."""
    failed: Exception | None = None
    for write_back, state, plugin, info in reversed(restores):
        try:
            write_back(state)
        except Exception as error:
            where = f"restoring the state of the module call {info.name or info.type!r}"
            named = handler_error(
                plugin,
                write_back,
                "the `write_back` function",
                WRITE_BACK_CONTRACT,
                where=f"{where} after tracing",
                error=error,
            )
            named.__cause__ = error
            if raising is not None:
                raising.add_note(f"while tracing ended, {named}")
            elif failed is None:  # (a backend's own message to the user passes as it is)
                failed = error if isinstance(error, MoxError | RecursionError) else named
    if failed is not None:
        raise failed


def make_mox(fun: Callable[..., Any]) -> Callable[..., Mox]:
    """Trace `fun` into a module expression, like `jax.make_jaxpr` traces a jaxpr.

    Calls of modules of any installed backend become `module_call` nodes (type, name,
    static attributes; their parameters are inputs of the node); everything else is kept
    as jaxpr equations, higher-order ones (`jit`, `custom_jvp_call`, ...) as single nodes.
    The function is traced once, as `jax.make_jaxpr` traces it, with Python's cyclic
    garbage collector paused (process-wide; it resumes when the outermost trace, `dumps`
    or `loads` running ends): a trace keeps nearly everything it allocates, so the
    collector's passes would only scan it again and again.

    Safe from several threads, on one model too: traces take turns (a process-wide lock,
    `eval_mox` reading its arguments takes it too), because while a model's calls are
    traced its modules hold the traced values, as the calls themselves would update them;
    the model is as it was when the trace ends. Other code reading the model from another
    thread meanwhile (calling it) may see those values: pass the model as an argument
    (`make_mox(lambda m, x: m(x))(model, x)`) and the trace works on its own copy.

    Args:
        fun: the function to trace. The array leaves of its positional arguments, and
            of keyword arguments holding arrays (Linen's `rngs={"dropout": key}`), are
            traced: pass models positionally (`make_mox(lambda m, x: m(x))(model, x)`,
            for models that are pytrees). Every other leaf (an activation function, a
            flag, a string) is static and baked in, as `eqx.filter_make_jaxpr` does;
            so are keyword arguments without arrays (`train=True`). A Python number
            passed as a whole positional argument is traced, as `jax.make_jaxpr` does.

    Returns:
        A function taking `fun`'s arguments (arrays or `jax.ShapeDtypeStruct`s) and
        returning a `Mox`.

    Example:
        >>> mox = make_mox(model)(x)          # doctest: +SKIP
        >>> print(mox)                        # doctest: +SKIP
        >>> y = eval_mox(mox, x)              # doctest: +SKIP
    """

    def trace(*args: Any, **kwargs: Any) -> Mox:
        check_interceptors_for(fun, args, kwargs)
        traced_kwargs = {k: v for k, v in kwargs.items() if _holds_arrays(v)}
        static_kwargs = {k: v for k, v in kwargs.items() if k not in traced_kwargs}
        leaves, in_tree = jax.tree_util.tree_flatten(args)
        kw_leaves, kw_tree = jax.tree_util.tree_flatten(traced_kwargs)
        n_args = len(leaves)
        every = [*leaves, *kw_leaves]
        traced = _traced_positions(args, every)
        out_store: dict[str, Any] = {}
        record = [True]  # whether module calls record their state leaves (`call_region`)

        def flat_fun(*flat: Any) -> list[Any]:
            session = _session.get()
            recording = None
            if record[0] and flat and session is not None:
                trace = find_top_trace(flat)
                eqns = _tracing_eqns(trace)
                starts = [] if eqns is not None else None
                ends = [] if eqns is not None and ENDS_BY_POSITION else None
                recording = session.recording = _Recording(trace, type(flat[0]), eqns, starts, ends)
            full = list(every)
            for position, value in zip(traced, flat, strict=True):
                full[position] = value
            call_args = in_tree.unflatten(full[:n_args])
            call_kwargs = kw_tree.unflatten(full[n_args:])
            out = fun(*call_args, **call_kwargs, **static_kwargs)
            if recording is not None and (recording.starts or recording.ends):
                out_store["starts"] = True
                out_store["positions"] = _Positions.of(recording)
            out_leaves, out_store["tree"] = jax.tree_util.tree_flatten(out)
            return out_leaves

        def converted() -> Block:
            fresh = lambda *flat: flat_fun(*flat)  # (jax keeps traces by function)
            out_store["starts"] = out_store["positions"] = None
            with intercepting():
                closed = jax.make_jaxpr(fresh)(*(every[i] for i in traced))
            positions = out_store["positions"]
            if not out_store["starts"]:
                return convert_closed(closed)
            if positions is None or not positions.matches(closed.jaxpr):
                raise _StaleRecording  # (jax moved, dropped or rebuilt equations)
            return convert(closed.jaxpr, closed.consts, positions.starts, positions.ends)

        with collector_paused():
            try:
                block = converted()
            except _StaleRecording:  # (never seen; a later jax might rename variables)
                record[0] = False
                block = converted()
        kept = set(traced)
        return Mox(
            block,
            in_tree,
            out_store["tree"],
            kwargs_tree=kw_tree if traced_kwargs else None,
            static_kwargs=tuple(sorted(static_kwargs.items())),
            static_leaves=tuple((i, leaf) for i, leaf in enumerate(every) if i not in kept),
        )

    def take_turns(*args: Any, **kwargs: Any) -> Mox:
        with TRACING, recursion_headroom() as limit:
            try:
                return trace(*args, **kwargs)
            except RecursionError as error:
                name = getattr(fun, "__qualname__", type(fun).__qualname__)
                raise MoxError(
                    f"tracing `{name}` nested deeper than Python allows ({limit} frames "
                    "while tracing): its module calls nest too "
                    "deeply, or recurse without end. Raise the limit with "
                    "`sys.setrecursionlimit(...)` (tracing allows "
                    f"{TRACE_RECURSION_FACTOR} times as many frames, up to "
                    f"{TRACE_RECURSION_CAP}), or call deep stacks of layers in a loop."
                ) from error

    return take_turns


@contextlib.contextmanager
def recursion_headroom() -> Any:
    """Raise Python's recursion limit as `TRACE_RECURSION_FACTOR` says inside the block
    (under `TRACING`: traces set and restore it in turn); yields the limit in force."""
    limit = sys.getrecursionlimit()
    raised = max(limit, min(TRACE_RECURSION_FACTOR * limit, TRACE_RECURSION_CAP))
    if raised == limit:
        yield limit
        return
    sys.setrecursionlimit(raised)
    try:
        yield raised
    finally:
        if sys.getrecursionlimit() == raised:  # unless the traced function changed it
            sys.setrecursionlimit(limit)


def is_traced_leaf(leaf: object, *, argument: bool = False) -> bool:
    """Whether `make_mox` traces a leaf of its arguments: arrays and shape-dtype structs;
    a Python number only when it is a whole positional argument (`argument`), as
    `jax.make_jaxpr` traces it. Everything else is static."""
    if is_array(leaf) or isinstance(leaf, jax.ShapeDtypeStruct):
        return True
    return argument and isinstance(leaf, (bool, int, float, complex))


def _traced_positions(args: tuple[Any, ...], leaves: Sequence[Any]) -> list[int]:
    """Positions of the traced leaves among the arguments' leaves (positional first)."""
    whole: set[int] = set()
    position = 0
    for arg in args:
        treedef = jax.tree_util.tree_structure(arg)
        if treedef.num_leaves == 1 and jax.tree_util.treedef_is_leaf(treedef):
            whole.add(position)
        position += treedef.num_leaves
    return [i for i, leaf in enumerate(leaves) if is_traced_leaf(leaf, argument=i in whole)]


def _holds_arrays(value: object) -> bool:
    """Whether a keyword argument is traced: some leaf of it is an array."""
    return any(is_traced_leaf(leaf) for leaf in jax.tree_util.tree_leaves(value))


def convert_closed(closed: jex.ClosedJaxpr) -> Block:
    """Convert a traced closed jaxpr into a MoX block (marked calls become module calls)."""
    return convert(closed.jaxpr, closed.consts)


def convert(
    jaxpr: jex.Jaxpr,
    consts: Sequence[Any] = (),
    starts: Sequence[tuple[int, CallMarker]] = (),
    ends: Sequence[_End] = (),
) -> Block:
    """Convert an open jaxpr and its constants into a MoX block (see `convert_closed`).

    `starts`: `(position, marker)` of each call that has no begin marker (its first
    equation's index in `jaxpr.eqns`, in the order the calls started; see `call_region`).
    `ends`: each of those calls that has no end marker either, in the order they ended
    (at a position, a call ends before another starts).

    One pass takes every marker pair for a module call, as a trace's markers nearly always
    are; where one is not (its markers do not pair up, or one of its values escapes it),
    that pass stops and a first pass (`_find_calls`) picks the calls to keep."""
    try:
        return _Converter(jaxpr, consts, None, starts, ends).run()
    except _Dissolve:
        return _Converter(jaxpr, consts, _find_calls(jaxpr, starts, ends), starts, ends).run()


class _Ending(NamedTuple):
    """What `_Converter.close` reads of an end marker, for a call that ended without one."""

    invars: tuple[Any, ...]
    outvars: tuple[Any, ...]
    params: dict[str, Any]


class _Dissolve(Exception):
    """Some marker pair of the jaxpr cannot be a module call (see `convert`)."""


class _StaleRecording(Exception):
    """A begin marker recorded a state variable the jaxpr does not define (or defines as a
    constant): `make_mox` then traces again without recording (see `call_region`)."""


# --- pass 1: which marker pairs become module calls --------------------------------------


@dataclass(eq=False)
class _Call:
    """One begin marker while the first pass reads the jaxpr."""

    marker: CallMarker
    parent: _Call | None
    open: bool = True
    kept: bool = True


class _Kept(NamedTuple):
    """The module calls the conversion keeps (`_find_calls`): the indices of their marker
    equations, and of their entries in `starts` (the calls without a begin marker) and
    `ends` (without an end marker)."""

    eqns: set[int]
    starts: set[int]
    ends: set[int]


def _find_calls(
    jaxpr: jex.Jaxpr,
    starts: Sequence[tuple[int, CallMarker]] = (),
    call_ends: Sequence[_End] = (),
) -> _Kept:
    """The marker equations, starts and ends that delimit module calls (the others
    dissolve).

    A call is kept when its begin (or start) and end markers pair up and no value defined
    between them is used after its end other than through the end marker. A start reads
    its recorded variables, as a begin marker reads its operands; an end without a marker
    reads the variables it returns, which are then its caller's.
    """
    stack: list[_Call] = []
    defined_in: dict[Any, _Call] = {}
    begins: dict[int, _Call] = {}
    started: dict[int, _Call] = {}
    ends: dict[int, _Call] = {}
    ended: dict[int, _Call] = {}  # by index in `call_ends`

    def use(atoms: Sequence[Any]) -> None:
        for atom in atoms:
            if atom.__class__ is Literal:
                continue
            call = defined_in.get(atom)
            while call is not None and not call.open:  # escapes a finished call
                call.kept = False
                call = call.parent

    def pop(marker: CallMarker) -> _Call | None:
        """Close the open call of `marker` (`None` if none is open), and the calls inside
        it whose ends were dropped."""
        if not any(c.marker is marker for c in stack):
            return None
        while stack[-1].marker is not marker:  # its inner ends were dropped
            lost = stack.pop()
            lost.open = lost.kept = False
        call = stack.pop()
        call.open = False
        return call

    def end(k: int, call_end: _End) -> _Call | None:
        """The call of `call_end` ends (see `_End`); returns the innermost open call."""
        use(call_end.outvars)
        call = pop(call_end.marker)
        if call is not None:
            ended[k] = call
        caller = stack[-1] if stack else None
        for var in call_end.outvars:  # the caller's own now
            if caller is not None:
                defined_in[var] = caller
            else:
                defined_in.pop(var, None)
        return caller

    top: _Call | None = None  # the innermost open call (`stack[-1]`)
    defined_in_get = defined_in.get
    pending = iter(enumerate(starts))
    next_start = next(pending, None)
    pending_ends = iter(enumerate(call_ends))
    next_end = next(pending_ends, None)
    for index, eqn in enumerate(jaxpr.eqns):
        while next_end is not None and next_end[1].position == index:
            top = end(*next_end)
            next_end = next(pending_ends, None)
        while next_start is not None and next_start[1][0] == index:
            k, (_, marker) = next_start
            use([v for v in _recorded_inputs(marker) if v is not None])
            top = started[k] = _Call(marker, top)
            stack.append(top)
            next_start = next(pending, None)
        for atom in eqn.invars:  # `use`, inline
            if atom.__class__ is not Literal:
                call = defined_in_get(atom)
                while call is not None and not call.open:  # escapes a finished call
                    call.kept = False
                    call = call.parent
        primitive = eqn.primitive
        if primitive is begin_p:
            top = _Call(eqn.params["call"], top)
            begins[index] = top
            stack.append(top)
        elif primitive is end_p:
            call = pop(eqn.params["call"])
            if call is not None:
                ends[index] = call
                top = stack[-1] if stack else None
        if top is not None:  # `define`
            for atom in eqn.outvars:
                defined_in[atom] = top
    while next_end is not None:  # calls that ended after the last equation
        top = end(*next_end)
        next_end = next(pending_ends, None)
    use(jaxpr.outvars)
    for call in stack:  # never ended
        call.kept = False
    paired = {id(c) for c in (*ends.values(), *ended.values())}
    return _Kept(
        {i for i, c in begins.items() if c.kept and id(c) in paired}
        | {i for i, c in ends.items() if c.kept},
        {k for k, c in started.items() if c.kept and id(c) in paired},
        {k for k, c in ended.items() if c.kept},
    )


# --- pass 2: build the blocks --------------------------------------------------------------


@dataclass(eq=False)
class _Scope:
    """A block being built: the root, or the body of a module call."""

    parent: _Scope | None
    begin: jex.JaxprEqn | None = None  # (`None` for a call that started without one)
    marker: CallMarker | None = None
    done: bool = False  # its end marker has passed
    nodes: list[Any] = field(default_factory=list)
    consts: dict[Any, Var] = field(default_factory=dict)  # root constvar -> its var here
    closed: dict[Any, tuple[Any, Var]] = field(default_factory=dict)  # var -> (outer, inner)
    n_recorded: int = 0  # the first entries of `closed`: the module's recorded state,
    n_recorded_args: int = 0  # then its recorded arguments


def _recorded_inputs(marker: CallMarker) -> tuple[Any, ...]:
    """The variables `marker` recorded (`None` for a marker operand): state, then args."""
    return (*(marker.recorded or ()), *(marker.recorded_args or ()))


#: `_Converter.owner` of the variables `resolve` must see to: the jaxpr's constants and the
#: variables in `subst`.
_ELSEWHERE = _Scope(None)


class _Converter:
    """Builds the blocks in one pass over the jaxpr. `calls`: the indices of the marker
    equations that delimit module calls (`_find_calls`; the others dissolve), or `None`:
    every marker pair is one, and `_Dissolve` is raised where one cannot be."""

    def __init__(
        self,
        jaxpr: jex.Jaxpr,
        consts: Sequence[Any],
        calls: _Kept | None,
        starts: Sequence[tuple[int, CallMarker]] = (),
        ends: Sequence[_End] = (),
    ) -> None:
        self.jaxpr = jaxpr
        self.calls = calls
        self.starts = starts
        self.ends = ends
        self.const_values = dict(zip(jaxpr.constvars, consts, strict=True))
        self.subst: dict[Any, Any] = {}  # dissolved markers and pruned state outputs
        #: scope defining each var (root vars: absent; `_ELSEWHERE`: see `resolve`)
        self.owner: dict[Any, _Scope] = dict.fromkeys(jaxpr.constvars, _ELSEWHERE)
        #: `jaxpr_params` by the params dict's id (held, so the id stays its own): the
        #: equations jax or the loader makes from one template share their params dict
        self.params_jaxprs: dict[int, tuple[Any, list[Any]]] = {}
        self.root = _Scope(None)
        #: variables known to be defined at the root (`check_recorded`), filled lazily
        self.root_defined: set[Any] | None = None

    def run(self) -> Block:
        scope = root = self.root
        equation, owner, calls = self.equation, self.owner, self.calls
        params_jaxprs = self.params_jaxprs
        owner_of = owner.get
        nodes = scope.nodes
        starts, k = self.starts, 0
        next_start = starts[0][0] if starts else -1
        ends, e = self.ends, 0
        next_end = ends[0].position if ends else -1
        for index, eqn in enumerate(self.jaxpr.eqns):
            while next_end == index:  # calls that end here, without a marker
                scope = self.end_call(scope, e)
                nodes = scope.nodes
                e += 1
                next_end = ends[e].position if e < len(ends) else -1
            while next_start == index:  # calls that start here, without a marker
                if calls is None or k in calls.starts:
                    scope = _Scope(scope, None, starts[k][1])
                    self.enter_recorded(scope, starts[k][1])
                    nodes = scope.nodes
                k += 1
                next_start = starts[k][0] if k < len(starts) else -1
            primitive = eqn.primitive
            if primitive is begin_p or primitive is end_p:
                if calls is not None and index not in calls.eqns:
                    self.dissolve(eqn)
                elif primitive is begin_p:
                    marker = eqn.params["call"]
                    scope = _Scope(scope, eqn, marker)
                    self.own(eqn.outvars, scope)
                    if marker.recorded is not None:
                        self.enter_recorded(scope, marker)
                elif calls is None and scope.marker is not eqn.params["call"]:
                    raise _Dissolve  # an end without its begin: some inner end was dropped
                else:
                    scope = self.close(scope, eqn)
                nodes = scope.nodes
                continue
            outvars = eqn.outvars
            if not outvars and not eqn.effects:  # dead: a residue of partial evaluation
                if calls is None:  # (a use all the same, as `_find_calls` counts it)
                    self.check_escapes(eqn.invars)
                continue
            # most equations read only their own block's variables and name every output:
            # kept as they are, without `equation`'s rewriting (`owner` sends the others,
            # those reading constants and substituted variables included, to `equation`)
            for atom in eqn.invars:
                if atom.__class__ is not Literal and owner_of(atom, root) is not scope:
                    nodes.append(equation(eqn, scope))
                    break
            else:
                for atom in outvars:
                    if atom.__class__ is DropVar:
                        nodes.append(equation(eqn, scope))
                        break
                else:
                    nodes.append(
                        new_equation(eqn) if not eqn.params else equation_node(eqn, params_jaxprs)
                    )
            if scope is not root:
                for atom in outvars:
                    owner[atom] = scope
        for last in range(e, len(ends)):  # calls that end after the last equation
            scope = self.end_call(scope, last)
        if scope is not root:
            raise _Dissolve  # a begin without its end (`calls` is then `None`)
        outvars = tuple(self.resolve(a, self.root) for a in self.jaxpr.outvars)
        return self.block(self.root, tuple(self.jaxpr.invars), outvars)

    def end_call(self, scope: _Scope, k: int) -> _Scope:
        """Finish the call of `self.ends[k]` (which has no end marker) as `close` does at
        an end marker: the call gets fresh outputs, and its caller's readers of the
        variables the body returned read those instead. Returns the enclosing scope."""
        end = self.ends[k]
        if self.calls is not None and k not in self.calls.ends:
            return scope  # dissolved: what its body defined is its caller's
        if self.calls is None and scope.marker is not end.marker:
            raise _Dissolve  # some inner call did not pair up
        fresh = tuple(jex.Var(v.aval) for v in end.outvars)
        params = {"call": end.marker, "n_state_out": end.n_state_out}
        parent = self.close(scope, _Ending(end.outvars, fresh, params))
        for var, new in zip(end.outvars, fresh, strict=True):
            self.substitute(var, new)
            self.owner[new] = parent  # (at the root too: `defines` knows it then)
        return parent

    def enter_recorded(self, scope: _Scope, marker: CallMarker) -> None:
        """Give the body of `scope` a fresh input for each state variable and argument its
        marker recorded (`CallMarker.recorded`, `recorded_args`): the first entries of
        `scope.closed`, so that `resolve` rewrites the body's readers of the variable to
        read the input."""
        parent, closed, owner = scope.parent, scope.closed, self.owner
        assert parent is not None
        in_parent = parent.closed.get  # (mostly the parent's own recorded state)
        count = 0
        for var in _recorded_inputs(marker):
            if var is None:
                continue
            var = self.find(var)
            found = in_parent(var)
            if found is not None:
                outer = found[1]
            elif self.defines(var):
                outer = self.resolve(var, parent)
            else:
                raise _StaleRecording
            inner = closed[var] = (outer, Var(var.aval))
            owner[inner[1]] = scope
            count += 1
        if len(closed) != count:  # two leaves, one variable (after substitution)
            raise _StaleRecording
        scope.n_recorded_args = len(marker.recorded_args or ())
        scope.n_recorded = count - scope.n_recorded_args

    def defines(self, var: Any) -> bool:
        """Whether the jaxpr defines `var` as an input or an equation's output (a
        variable recorded in another trace, or a constant, is not one of those)."""
        if not isinstance(var, Var) or var in self.const_values:
            return False
        if var in self.owner:
            return True
        if self.root_defined is None:
            self.root_defined = set(self.jaxpr.invars)
        if var in self.root_defined:
            return True
        for eqn in self.jaxpr.eqns:  # (a variable defined by an equation: rare, once)
            self.root_defined.update(eqn.outvars)
        return var in self.root_defined

    def find(self, atom: Any) -> Any:
        """What `atom` stands for: itself, or what substituted it (in turn, where a call's
        output substituted the variable that substituted it)."""
        subst = self.subst
        while isinstance(atom, Var) and atom in subst:
            atom = subst[atom]
        return atom

    def own(self, atoms: Sequence[Any], scope: _Scope) -> None:
        if scope is not self.root:
            for atom in atoms:
                self.owner[atom] = scope

    def check_escapes(self, atoms: Sequence[Any]) -> None:
        """Raise `_Dissolve` if one of `atoms` was defined in a call that has ended."""
        for atom in atoms:
            if atom.__class__ is not Literal:
                if self.owner.get(self.find(atom), self.root).done:
                    raise _Dissolve

    def dissolve(self, eqn: jex.JaxprEqn) -> None:
        for outer, inner in zip(eqn.outvars, eqn.invars, strict=True):
            self.substitute(outer, inner)

    def substitute(self, var: Any, by: Any) -> None:
        """Make the readers of `var` read `by` (whatever `by` stands for)."""
        self.subst[var] = self.find(by)
        self.owner[var] = _ELSEWHERE

    def resolve(self, atom: Any, scope: _Scope) -> Any:
        """The atom naming `atom` inside `scope`: itself, a local constant, or the input
        that carries it in through every call between its definition and `scope`."""
        if atom.__class__ is Literal:
            return atom
        if atom in self.subst:
            atom = self.find(atom)
        if not isinstance(atom, Var):  # a dissolved marker forwarded a literal
            return atom
        if atom in self.const_values:
            return self.local_const(atom, scope)
        home = self.owner.get(atom, self.root)
        if home is scope:
            return atom
        if home.done:  # defined in a call that has ended: it escapes that call
            raise _Dissolve
        chain = []
        while scope is not home and atom not in scope.closed:
            chain.append(scope)
            scope = scope.parent  # type: ignore[assignment]  # home encloses scope
        value = atom if scope is home else scope.closed[atom][1]
        for inner_scope in reversed(chain):
            local = jex.Var(atom.aval)
            inner_scope.closed[atom] = (value, local)
            self.owner[local] = inner_scope
            value = local
        return value

    def local_const(self, constvar: Any, scope: _Scope) -> Any:
        """The variable of a root constant in `scope`: each block holds the constants its
        own equations use (the root keeps the original variables)."""
        local = scope.consts.get(constvar)
        if local is None:
            local = constvar if scope is self.root else jex.Var(constvar.aval)
            scope.consts[constvar] = local
        return local

    def equation(self, eqn: jex.JaxprEqn, scope: _Scope) -> Equation:
        resolve = self.resolve
        invars = [resolve(a, scope) for a in eqn.invars]
        outvars = _named(eqn.outvars)
        if any(map(operator.is_not, invars, eqn.invars)) or outvars is not eqn.outvars:
            eqn = new_jaxpr_eqn(
                invars,
                outvars,
                eqn.primitive,
                eqn.params,
                eqn.effects,
                eqn.source_info,
                eqn.ctx,
            )
        return equation_node(eqn, self.params_jaxprs)

    def close(self, scope: _Scope, end: jex.JaxprEqn | _Ending) -> _Scope:
        """Finish the module call of `scope` at its end marker; return the enclosing scope."""
        begin, marker, parent = scope.begin, scope.marker, scope.parent
        assert marker is not None and parent is not None
        n_state, n_state_out = marker.n_state, end.params["n_state_out"]
        recorded = marker.recorded
        # (an input the body never reads is a `DropVar` in jax 0.7 to 0.9: named, as the
        # inputs of a call that started without a marker are, on every jax)
        begin_ins, begin_outs = (
            (begin.invars, _named(begin.outvars)) if begin is not None else ((), ())
        )
        if n_state_out:
            body_ins = {var: j for j, var in enumerate(begin_outs)}
            own_recorded = set(itertools.islice(scope.closed, scope.n_recorded))
            keep = []
            for i, (outer, inner) in enumerate(zip(end.outvars, end.invars, strict=True)):
                found = self.find(inner)
                j = body_ins.get(found) if i < n_state_out else None
                if j is not None and j < n_state:  # an unchanged state leaf: pruned
                    self.substitute(outer, begin_ins[j])
                elif i < n_state_out and found in own_recorded:  # (a recorded one)
                    self.substitute(outer, found)
                else:
                    keep.append(i)
            kept_outvars = [end.outvars[i] for i in keep]
            kept_state = sum(1 for i in keep if i < n_state_out)
        else:  # (the common case: the call changed no state)
            keep, kept_outvars, kept_state = range(len(end.outvars)), end.outvars, 0
        resolve = self.resolve
        body_outs = tuple(resolve(end.invars[i], scope) for i in keep)
        owner_of, root = self.owner.get, self.root
        callers = [  # (most are the parent's own variables, as they are)
            a if a.__class__ is not Literal and owner_of(a, root) is parent else resolve(a, parent)
            for a in begin_ins
        ]
        closed = list(scope.closed.values())
        n_recorded = scope.n_recorded
        if recorded is None:
            state_ins, body_state = callers[:n_state], begin_outs[:n_state]
        else:  # the state leaves in the module's order: recorded ones and marker operands
            own = closed[:n_recorded]
            if n_state:
                passed = iter(zip(callers[:n_state], begin_outs[:n_state], strict=True))
                recorded_pairs = iter(own)
                own = [next(recorded_pairs if v is not None else passed) for v in recorded]
            state_ins, body_state = zip(*own, strict=True)
        if marker.recorded_args is None:
            arg_ins, body_args = callers[n_state:], begin_outs[n_state:]
        else:  # (no begin marker: every argument was recorded)
            arg_pairs = closed[n_recorded : n_recorded + scope.n_recorded_args]
            arg_ins, body_args = [o for o, _ in arg_pairs], [i for _, i in arg_pairs]
        closed = closed[n_recorded + scope.n_recorded_args :]
        invars = (*state_ins, *(outer for outer, _ in closed), *arg_ins)
        body_invars = (*body_state, *(inner for _, inner in closed), *body_args)
        outvars = tuple(_named(kept_outvars))
        call = ModuleCall(
            info=marker.info,
            invars=invars,
            outvars=outvars,
            body=self.block(scope, body_invars, body_outs),
            n_state=len(state_ins) + len(closed),
            n_state_out=kept_state,
        )
        parent.nodes.append(call)
        scope.done = True
        self.own(outvars, parent)
        return parent

    def block(self, scope: _Scope, invars: tuple[Any, ...], outvars: tuple[Any, ...]) -> Block:
        if not scope.consts:
            return Block((), (), invars, tuple(scope.nodes), outvars)
        constvars = tuple(scope.consts.values())
        consts = tuple(map(self.const_values.__getitem__, scope.consts))
        return Block(constvars, consts, invars, tuple(scope.nodes), outvars)


def equation_node(eqn: jex.JaxprEqn, params_jaxprs: dict[int, tuple[Any, list[Any]]]) -> Equation:
    """The MoX node of `eqn`: its sub-jaxprs converted to regions.

    `params_jaxprs` holds `jaxpr_params` by the params dict's id (with the dict, so the
    id stays its own): the equations jax or the loader makes from one template share
    their params dict."""
    params = eqn.params
    hit = params_jaxprs.get(id(params))
    if hit is not None and hit[0] is params:
        found = hit[1]
    else:
        found = jaxpr_params(params)
        params_jaxprs[id(params)] = (params, found)
    if not found:
        return new_equation(eqn)
    regions = tuple(
        Region(key, index, _convert_any(value), isinstance(value, jex.ClosedJaxpr))
        for key, index, value in found
    )
    return new_equation(eqn, regions)


def named_equation(eqn: jex.JaxprEqn) -> jex.JaxprEqn:
    """`eqn` with every output named (`_named`): itself when they all are."""
    outvars = _named(eqn.outvars)
    if outvars is eqn.outvars:
        return eqn
    return new_jaxpr_eqn(
        eqn.invars, outvars, eqn.primitive, eqn.params, eqn.effects, eqn.source_info, eqn.ctx
    )


def _named(outvars: Sequence[Any]) -> Sequence[Any]:
    """`outvars` with a fresh variable for each unused one (`DropVar`, which jax 0.7 to 0.9
    put where jax 0.10 keeps a variable): every value of a MoX has a name, whatever jax
    traced it. The same sequence when there is none."""
    for v in outvars:
        if isinstance(v, DropVar):
            return [jex.Var(v.aval) if isinstance(v, DropVar) else v for v in outvars]
    return outvars


def _convert_any(jaxpr: jex.ClosedJaxpr | jex.Jaxpr) -> Block:
    if isinstance(jaxpr, jex.ClosedJaxpr):
        return convert_closed(jaxpr)
    return convert(jaxpr)
