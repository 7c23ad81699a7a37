"""`make_mox` records the state leaves that are variables of its own trace instead of
passing them through the begin markers (`call_region`): the MoX is the one the markers
would give, in every case, and a recording the jaxpr does not match is traced again."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend import core as jex

from bryo_mox import _trace, eval_mox, make_mox
from bryo_mox._ir import ModuleInfo
from bryo_mox._markers import CallMarker, begin_p, end_p, marker_equation
from bryo_mox.testing import Counter, Module


@dataclasses.dataclass
class _Traces:
    """The top-level jaxprs `make_mox` converted, and how many marker operands and
    recorded variables their begin markers hold."""

    jaxprs: list

    def recorded(self) -> int:
        return sum(
            sum(v is not None for v in e.params["call"].recorded or ())
            for j in self.jaxprs
            for e in j.jaxpr.eqns
            if e.primitive is begin_p
        )


def _traces(monkeypatch) -> _Traces:
    seen = _Traces([])
    original = _trace.convert_closed

    def spy(closed):
        seen.jaxprs.append(closed)
        return original(closed)

    monkeypatch.setattr(_trace, "convert_closed", spy)
    return seen


def _with_and_without_recording(monkeypatch, structure, fun, *args):
    """The MoX of `fun(*args)` made as `make_mox` makes it and with every state leaf
    through the markers; asserts they are the same MoX. Returns the first, and how many
    variables were recorded."""
    traces = _traces(monkeypatch)
    recorded = make_mox(fun)(*args)
    n_recorded = traces.recorded()
    with monkeypatch.context() as patch:
        patch.setattr(_trace, "_record", lambda leaves, recording: (None, leaves))
        plain = make_mox(fun)(*args)
    assert str(recorded) == str(plain)
    assert structure(recorded.block) == structure(plain.block)
    return recorded, n_recorded


def apply(model, v):
    return model(v)


def test_a_model_passed_in_is_recorded(toy, monkeypatch, mlp, x, mox_structure):
    mox, n_recorded = _with_and_without_recording(monkeypatch, mox_structure, apply, mlp, x)
    assert n_recorded == 8  # the MLP's 4 leaves, then each Linear's 2
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
    mox, n_recorded = _with_and_without_recording(monkeypatch, mox_structure, lambda v: mlp(v), x)
    assert n_recorded == 4
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
    mox, n_recorded = _with_and_without_recording(monkeypatch, mox_structure, fun, mlp, x)
    assert n_recorded == 0
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
    mox, n_recorded = _with_and_without_recording(monkeypatch, mox_structure, fun, mlp, counter, x)
    assert n_recorded > 0
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
    mox, n_recorded = _with_and_without_recording(
        monkeypatch, mox_structure, fun, pair, jnp.ones(2)
    )
    (call,) = mox.nodes
    assert n_recorded == 1 and call.n_state == 2  # the second leaf went through the marker
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
    monkeypatch.setattr(_trace, "_record", lambda leaves, recording: (None, leaves))
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
