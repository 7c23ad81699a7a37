"""`make_mox` records the state leaves that are variables of its own trace instead of
passing them through the begin markers (`call_region`), and a call whose inputs are all
recorded binds no begin marker at all (its start is a position in the trace's equations):
the MoX is the one the markers would give, in every case, and a recording the jaxpr does
not match is traced again."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend import core as jex

from bryo_mox import _trace, eval_mox, make_mox
from bryo_mox._compat import DropVar
from bryo_mox._ir import ModuleInfo
from bryo_mox._markers import CallMarker, begin_p, end_p, marker_equation
from bryo_mox.testing import Counter, Linear, Module


@dataclasses.dataclass
class _Traces:
    """The top-level jaxprs `make_mox` converted, and how many marker operands and
    recorded variables their begin markers hold."""

    jaxprs: list
    starts: list  # the calls each one started without a begin marker
    ends: list = dataclasses.field(default_factory=list)  # ... and ended without an end marker

    def markers(self) -> list:
        return [e.params["call"] for j in self.jaxprs for e in j.eqns if e.primitive is begin_p]

    def recorded(self) -> int:
        markers = [*self.markers(), *(m for starts in self.starts for _, m in starts)]
        return sum(sum(v is not None for v in m.recorded or ()) for m in markers)

    def n_started(self) -> int:
        return sum(map(len, self.starts))

    def n_ended(self) -> int:
        """The calls that ended without an end marker."""
        return sum(map(len, self.ends))

    def end_markers(self) -> int:
        return sum(e.primitive is end_p for j in self.jaxprs for e in j.eqns)


def _traces(monkeypatch) -> _Traces:
    seen = _Traces([], [])
    original = _trace.convert

    def spy(jaxpr, consts=(), starts=(), ends=()):
        seen.jaxprs.append(jaxpr)
        seen.starts.append(list(starts))
        seen.ends.append(list(ends))
        return original(jaxpr, consts, starts, ends)

    monkeypatch.setattr(_trace, "convert", spy)
    return seen


def _markers_only(patch) -> None:
    """Make `make_mox` pass every leaf and argument through the markers."""
    patch.setattr(_trace, "_record", lambda leaves, recording: (None, leaves))
    patch.setattr(_trace, "_tracing_eqns", lambda trace: None)


def _with_and_without_recording(monkeypatch, structure, fun, *args):
    """The MoX of `fun(*args)` made as `make_mox` makes it and with every state leaf
    through the markers; asserts they are the same MoX. Returns the first, and the
    jaxprs it converted (`_Traces`)."""
    traces = _traces(monkeypatch)
    recorded = make_mox(fun)(*args)
    seen = _Traces(list(traces.jaxprs), list(traces.starts), list(traces.ends))
    with monkeypatch.context() as patch:
        _markers_only(patch)
        plain = make_mox(fun)(*args)
    assert str(recorded) == str(plain)
    assert structure(recorded.block) == structure(plain.block)
    return recorded, seen


def apply(model, v):
    return model(v)


def test_a_model_passed_in_is_recorded(toy, monkeypatch, mlp, x, mox_structure):
    mox, seen = _with_and_without_recording(monkeypatch, mox_structure, apply, mlp, x)
    assert seen.recorded() == 8  # the MLP's 4 leaves, then each Linear's 2
    np.testing.assert_allclose(eval_mox(mox, mlp, x), mlp(x), rtol=1e-6)


def test_tracers_without_jaxs_private_attributes_go_through_the_markers():
    """Recording reads a tracer's private `_trace` and `val`: a JAX whose tracers lack
    them records nothing, and every leaf is a marker operand."""

    class Bare:
        pass

    trace, leaves = object(), [Bare(), Bare()]
    assert _trace._record(leaves, _trace._Recording(trace, Bare)) == (None, leaves)


def test_a_closed_over_model_goes_through_the_markers(toy, monkeypatch, mlp, x, mox_structure):
    """Concrete arrays are no variables of the trace: the outer call passes them through
    its marker, and the calls inside record the marker's outputs."""
    mox, seen = _with_and_without_recording(monkeypatch, mox_structure, lambda v: mlp(v), x)
    assert seen.recorded() == 4
    (call,) = mox.nodes
    assert call.n_state == 4 and len(mox.block.constvars) == 4
    np.testing.assert_allclose(eval_mox(mox, x), mlp(x), rtol=1e-6)


@pytest.mark.parametrize(
    "fun",
    [
        lambda m, v: jax.jit(apply)(m, v),
        lambda m, v: jax.lax.scan(lambda h, _: (m(h[:, :3]).sum() + h, None), v, None, 2)[0],
        lambda m, v: jax.grad(lambda mm: mm(v).sum())(m),
        lambda m, v: jax.vmap(m)(v),
        lambda m, v: jax.checkpoint(apply)(m, v),
    ],
    ids=["jit", "scan", "grad", "vmap", "checkpoint"],
)
def test_calls_in_other_traces_go_through_the_markers(toy, monkeypatch, mlp, x, fun, mox_structure):
    """Only `make_mox`'s own trace records: a jit, scan or checkpoint body is another
    trace (and jax may rebuild it with new variables), grad and vmap trace on top."""
    jax.clear_caches()  # (a jit traced before is reused as it is)
    mox, seen = _with_and_without_recording(monkeypatch, mox_structure, fun, mlp, x)
    assert seen.recorded() == 0
    for got, want in zip(
        jax.tree_util.tree_leaves(eval_mox(mox, mlp, x)),
        jax.tree_util.tree_leaves(fun(mlp, x)),
        strict=True,
    ):
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_changed_state_and_state_computed_before_the_call(toy, monkeypatch, mlp, x, mox_structure):
    def fun(m, c, v):
        m.layers[0].w = m.layers[0].w * 2.0  # a state leaf an equation of the caller makes
        return c(c(m(v)))

    counter = Counter()
    mox, seen = _with_and_without_recording(monkeypatch, mox_structure, fun, mlp, counter, x)
    assert seen.recorded() > 0
    assert [n.n_state_out for n in mox.nodes if hasattr(n, "n_state_out")][-2:] == [1, 1]


class _Pair(Module):
    """Two state leaves; `fun` below makes them one traced value."""

    def __init__(self):
        self.a = jnp.ones(2)
        self.b = jnp.zeros(2)

    def forward(self, v):
        return self.a * v + self.b


def test_two_leaves_holding_one_variable_get_two_inputs(toy, monkeypatch, mox_structure):
    def fun(pair, v):
        pair.b = pair.a
        return pair(v)

    pair = _Pair()
    mox, seen = _with_and_without_recording(monkeypatch, mox_structure, fun, pair, jnp.ones(2))
    (call,) = mox.nodes
    assert seen.recorded() == 1 and call.n_state == 2  # the second leaf went through the marker
    assert call.body.invars[0] is not call.body.invars[1]


def test_a_stale_recording_is_traced_again_without_recording(
    toy, monkeypatch, mlp, x, mox_structure
):
    """A recorded variable the jaxpr does not define (jax rebuilt it, say) makes the
    conversion refuse the jaxpr; `make_mox` traces once more, passing every leaf through
    the markers, and gives the usual MoX."""
    plain_record = _trace._record
    calls = []

    def stale_record(leaves, recording):
        recorded, operands = plain_record(leaves, recording)
        if recorded is not None:
            recorded = tuple(v if v is None else jex.Var(v.aval) for v in recorded)
        return recorded, operands

    def fun(m, v):
        calls.append(1)
        return m(v)

    monkeypatch.setattr(_trace, "_record", stale_record)
    mox = make_mox(fun)(mlp, x)
    assert len(calls) == 2
    _markers_only(monkeypatch)
    assert mox_structure(mox.block) == mox_structure(make_mox(fun)(mlp, x).block)
    np.testing.assert_allclose(eval_mox(mox, mlp, x), mlp(x), rtol=1e-6)


def test_the_conversion_refuses_a_variable_it_does_not_define():
    """A begin marker recording a variable of another jaxpr, or a constant, is refused
    (`_StaleRecording`); one recording an input of the jaxpr is taken."""
    identity = jax.make_jaxpr(lambda v: v)(jnp.ones(2)).jaxpr
    (x,) = identity.invars
    info = ModuleInfo("tests.M", "m", {})

    def recording(var, constvars=()):
        marker = CallMarker(info, 0, (var,))
        begin, _ = marker_equation(begin_p, [], {"call": marker})
        end, _ = marker_equation(end_p, [], {"call": marker, "n_state_out": 0})
        return identity.replace(constvars=list(constvars), eqns=[begin, end])

    (call,) = _trace.convert(recording(x)).nodes
    assert call.invars == (x,) and call.n_state == 1 and call.body.invars[0] is not x
    with pytest.raises(_trace._StaleRecording):
        _trace.convert(recording(jex.Var(x.aval)))
    const = jex.Var(x.aval)
    with pytest.raises(_trace._StaleRecording):
        _trace.convert(recording(const, [const]), [np.ones(2, np.float32)])


# --- calls that start without a begin marker --------------------------------------------


def test_calls_whose_inputs_are_all_recorded_bind_no_begin_marker(
    toy, monkeypatch, mlp, x, mox_structure
):
    """The MLP and its Linears take a model passed in and traced inputs: none of the three
    calls binds a begin marker, and the MoX is the one the markers give."""
    mox, seen = _with_and_without_recording(monkeypatch, mox_structure, apply, mlp, x)
    assert seen.n_started() == 3 and seen.markers() == []
    np.testing.assert_allclose(eval_mox(mox, mlp, x), mlp(x), rtol=1e-6)


class _Two(Module):
    """Calls its Linear on each of two arguments."""

    def __init__(self):
        self.lin = Linear(3, 3, key=jax.random.key(1))

    def forward(self, a, b):
        return self.lin(a) * 2.0, self.lin(b)


@pytest.mark.parametrize(
    ("fun", "n_started", "n_markers"),
    [
        (lambda two, v: two(v, v), 2, 1),  # one variable twice: a begin marker tells them apart
        (lambda two, v: two(v, jnp.ones_like(v)), 3, 0),
        (lambda two, v: two(v, np.ones((2, 3), np.float32)), 2, 1),  # a concrete array
        (lambda two, v: two(v, two.lin.w[:2]), 3, 0),  # part of a state leaf
        (lambda two, v: two(v, two.lin.w), 2, 1),  # a state leaf (of `two`) as an argument
    ],
    ids=["same-variable", "computed", "concrete", "slice-of-state", "state-leaf"],
)
def test_arguments_that_cannot_be_recorded_go_through_a_begin_marker(
    toy, monkeypatch, x, mox_structure, fun, n_started, n_markers
):
    two = _Two()
    mox, seen = _with_and_without_recording(monkeypatch, mox_structure, fun, two, x)
    assert seen.n_started() == n_started and len(seen.markers()) == n_markers
    for got, want in zip(
        jax.tree_util.tree_leaves(eval_mox(mox, two, x)),
        jax.tree_util.tree_leaves(fun(two, x)),
        strict=True,
    ):
        np.testing.assert_allclose(got, want, rtol=1e-6)


class _Leaky(Module):
    """Keeps an intermediate value outside its state: the value escapes the call."""

    def __init__(self, mlp, stash):
        self.mlp = mlp
        self.stash = stash

    def forward(self, v):
        h = jnp.tanh(v)
        self.stash.append(h)
        return self.mlp(h)


class _Ignores(Module):
    """Ignores its argument: reads it only by being called on it."""

    def __init__(self):
        self.c = jnp.ones(2)

    def forward(self, v):
        return self.c * 2.0


@pytest.mark.parametrize("reader", ["equation", "call"])
def test_a_call_whose_value_escapes_is_dissolved_as_with_markers(
    toy, monkeypatch, mlp, x, mox_structure, reader
):
    """The value escapes the call (read after it, not through the end marker): the call
    dissolves, its start included, and the calls inside stay calls. A call started on the
    value reads it, even where its body does not, as a begin marker would."""
    stash: list = []

    def fun(m, ignores, v):
        stash.clear()
        y = m(v)
        return y + (stash[0].sum() if reader == "equation" else ignores(stash[0]).sum())

    leaky = _Leaky(mlp, stash)
    mox, seen = _with_and_without_recording(monkeypatch, mox_structure, fun, leaky, _Ignores(), x)
    assert seen.n_started() == 4 + (reader == "call")  # _Leaky, MLP, its Linears (_Ignores)
    calls = [n.info.type for n in mox.nodes if hasattr(n, "info")]
    assert calls[0] == "bryo_mox.testing.MLP" and "bryo_mox.testing._Leaky" not in calls
    expected = fun(_Leaky(mlp, stash), _Ignores(), x)
    np.testing.assert_allclose(eval_mox(mox, leaky, _Ignores(), x), expected, rtol=1e-6)


def test_a_jax_without_the_trace_equation_list_binds_begin_markers(
    toy, monkeypatch, mlp, x, mox_structure
):
    """Starting a call without a marker reads the trace's private equation list; a jax
    without one (`_tracing_eqns` finds none) records the state and binds begin markers."""
    assert _trace._tracing_eqns(object()) is None
    monkeypatch.setattr(_trace, "_tracing_eqns", lambda trace: None)
    mox, seen = _with_and_without_recording(monkeypatch, mox_structure, apply, mlp, x)
    assert seen.n_started() == 0 and len(seen.markers()) == 3 and seen.recorded() == 8
    np.testing.assert_allclose(eval_mox(mox, mlp, x), mlp(x), rtol=1e-6)


@pytest.mark.parametrize("fault", ["moved", "unreadable"])
def test_positions_the_jaxpr_does_not_match_are_traced_again_with_markers(
    toy, monkeypatch, mlp, x, mox_structure, fault
):
    """Calls' starts are positions in the trace's equations, checked against the jaxpr
    jax returns: equations jax moved or rebuilt (here: the snapshot names other
    variables), or a trace whose entries are no equations, make `make_mox` trace once
    more with markers; the MoX is the usual one."""
    plain_of = _trace._Positions.of

    def faulty(recording):
        found = plain_of(recording)
        if fault == "unreadable":
            return None
        return found._replace(outvars=[jex.Var(v.aval) for v in found.outvars])

    calls = []

    def fun(m, v):
        calls.append(1)
        return m(v)

    monkeypatch.setattr(_trace._Positions, "of", staticmethod(faulty))
    mox = make_mox(fun)(mlp, x)
    assert len(calls) == 2
    monkeypatch.undo()
    _markers_only(monkeypatch)
    assert mox_structure(mox.block) == mox_structure(make_mox(fun)(mlp, x).block)


def test_positions_check_every_equation_in_order():
    """`_Positions.matches`: the jaxpr's first equations, their outputs by identity."""
    jaxpr = jax.make_jaxpr(lambda v: jnp.sin(v) * 2.0)(jnp.ones(2)).jaxpr
    lengths = [len(e.outvars) for e in jaxpr.eqns]
    outvars = [v for e in jaxpr.eqns for v in e.outvars]
    positions = _trace._Positions([], [], lengths, outvars)
    assert positions.matches(jaxpr)
    assert _trace._Positions([], [], lengths[:1], outvars[:1]).matches(jaxpr)  # (a prefix)
    assert not _trace._Positions([], [], lengths[::-1], outvars[::-1]).matches(jaxpr)
    assert not _trace._Positions([], [], [*lengths, 1], [*outvars, outvars[0]]).matches(jaxpr)
    assert not _trace._Positions([], [], [0, 2], outvars).matches(jaxpr)
    dropped = jaxpr.replace(  # (jax 0.7 to 0.9 drop an output nothing reads)
        eqns=[jaxpr.eqns[0].replace(outvars=[DropVar(outvars[0].aval)]), *jaxpr.eqns[1:]]
    )
    assert positions.matches(dropped)
    ended = positions._replace(ends=[_trace._End(1, None, (outvars[0],), 0)])
    assert ended.matches(jaxpr) and not ended.matches(dropped)  # (a call's output dropped)


class _Identity(Module):
    """Returns its argument: a body without equations."""

    def __init__(self):
        self.c = jnp.ones(2)

    def forward(self, v):
        return v


class _NoInputs(Module):
    """No state, no argument: a call with nothing to record."""

    def forward(self):
        return jnp.ones(2)


def test_a_body_without_equations_and_a_call_without_inputs(toy, monkeypatch, mox_structure):
    """Bodies without equations (a start right before its end marker: an identity called
    on an identity's output) and a call with nothing to record, all without begin
    markers: the MoX the markers give."""

    def fun(identity, nothing, v):
        return identity(identity(v)) * 2.0 + nothing()

    args = (_Identity(), _NoInputs(), jnp.ones(2))
    mox, seen = _with_and_without_recording(monkeypatch, mox_structure, fun, *args)
    assert seen.n_started() == 3 and seen.markers() == []
    first, second, nothing = (n for n in mox.nodes if hasattr(n, "body"))
    assert first.body.nodes == () and first.body.outvars == first.body.invars[1:]
    assert second.invars[1] is first.outvars[0] and nothing.invars == ()
    np.testing.assert_allclose(eval_mox(mox, *args), np.full(2, 3.0))


_ends_by_position = pytest.mark.skipif(
    not _trace.ENDS_BY_POSITION, reason="calls end with markers on jax before 0.10"
)


@_ends_by_position
def test_calls_returning_what_their_bodies_compute_bind_no_end_marker(
    toy, monkeypatch, mlp, x, mox_structure
):
    """The MLP and its Linears return values their own equations compute: none of the
    three calls binds an end marker (their ends are positions, as their starts are), and
    the MoX is the one the markers give, fresh call outputs included."""
    mox, seen = _with_and_without_recording(monkeypatch, mox_structure, apply, mlp, x)
    assert seen.n_started() == seen.n_ended() == 3 and seen.end_markers() == 0
    (call,) = mox.nodes
    assert call.outvars[0] is not call.body.outvars[0] and mox.outvars == call.outvars
    np.testing.assert_allclose(eval_mox(mox, mlp, x), mlp(x), rtol=1e-6)


@_ends_by_position
def test_changed_state_ends_without_a_marker(toy, monkeypatch, mox_structure):
    """A call that changes its state (`Counter`) returns the new state leaf and its
    output, both computed by its body: no end marker, and each call's new count is the
    next call's input."""

    def fun(c, v):
        return c(c(v))

    mox, seen = _with_and_without_recording(monkeypatch, mox_structure, fun, Counter(), jnp.ones(2))
    assert seen.n_ended() == 2 and seen.end_markers() == 0
    first, second = mox.nodes
    assert first.n_state_out == second.n_state_out == 1
    assert second.invars[0] is first.outvars[0] and second.invars[1] is first.outvars[1]


class _Twice(Module):
    """Returns one value twice."""

    def __init__(self):
        self.c = jnp.ones(2)

    def forward(self, v):
        y = v * self.c
        return y, y


class _Stored(Module):
    """Returns one of its own state leaves, computed before the call."""

    def __init__(self):
        self.c = jnp.ones(2)

    def forward(self, v):
        return self.c


@_ends_by_position
@pytest.mark.parametrize(
    ("module", "fun"),
    [
        (_Identity, lambda m, v: m(v) * 2.0),  # its argument
        (_Twice, lambda m, v: m(v)),  # one variable twice: only a marker tells them apart
        (_Stored, lambda m, v: m(v) + v),  # its state leaf, defined before it started
    ],
    ids=["argument", "twice", "state-leaf"],
)
def test_calls_returning_values_their_bodies_do_not_compute_bind_an_end_marker(
    toy, monkeypatch, mox_structure, module, fun
):
    mox, seen = _with_and_without_recording(monkeypatch, mox_structure, fun, module(), jnp.ones(2))
    assert seen.n_started() == 1 and seen.n_ended() == 0 and seen.end_markers() == 1
    call = next(n for n in mox.nodes if hasattr(n, "body"))
    assert set(call.outvars).isdisjoint(call.body.outvars)  # fresh outputs all the same
    np.testing.assert_allclose(
        jax.tree_util.tree_leaves(eval_mox(mox, module(), jnp.ones(2))),
        jax.tree_util.tree_leaves(fun(module(), jnp.ones(2))),
    )


class _Keeps(Module):
    """Keeps its own output outside its state as well as returning it."""

    def __init__(self, stash):
        self.c = jnp.ones(2)
        self.stash = stash

    def forward(self, v):
        y = jnp.tanh(v * self.c)
        self.stash.append(y)
        return y


@_ends_by_position
def test_an_output_kept_aside_and_read_after_the_call_is_the_calls_output(toy):
    """Reading the very value a call returned, kept aside by its body, reads the call's
    output: the call stays a call (with an end marker, the read went around the marker,
    and the call dissolved as for any value escaping it)."""
    stash: list = []

    def fun(m, v):
        stash.clear()
        y = m(v)
        return y + stash[0]

    mox = make_mox(fun)(_Keeps(stash), jnp.ones(2))
    (call, add) = mox.nodes
    assert call.info.type.endswith("_Keeps") and add.invars == (call.outvars[0],) * 2
    np.testing.assert_allclose(eval_mox(mox, _Keeps(stash), jnp.ones(2)), 2 * np.tanh(1.0))
