"""How `make_mox` hands NNX-style modules their state: nested calls read their Variables
from the model's flattening, and the traced function computes what the model computes,
also with shared modules and Variables, state updates, structure changes inside a call
(`sow`) and raw array leaves; the model is left as it was."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import bryo_mox as yax
from bryo import nnx

X = jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)


class Shared(nnx.Module):
    """A module called twice under two names, and a Variable held by two modules."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.first = nnx.Linear(4, 4, rngs=rngs)
        self.again = self.first
        self.other = nnx.Linear(4, 4, rngs=rngs)
        self.other.bias = self.first.bias

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.other(self.again(self.first(x)))


class Sowing(nnx.Module):
    """A module whose call adds a Variable (a structure change) and updates batch stats."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.norm = nnx.BatchNorm(4, use_running_average=False, rngs=rngs)
        self.linear = nnx.Linear(4, 4, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.linear(self.norm(x))
        self.sow(nnx.Intermediate, "hidden", h)
        return h * 2


class RawLeaf(nnx.Module):
    """A module holding a raw array (no Variable) as data."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.table = nnx.data(jnp.arange(4.0))
        self.linear = nnx.Linear(4, 4, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        y = self.linear(x)
        return y + jnp.broadcast_to(self.table, y.shape)


class Wrapper(nnx.Module):
    def __init__(self, inner: nnx.Module) -> None:
        self.inner = inner

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.inner(x) + 1


def _values(model: nnx.Module) -> list[jax.Array]:
    return jax.tree.leaves(nnx.state(model))


def _assert_unchanged(model: nnx.Module, before: list[jax.Array]) -> None:
    after = _values(model)
    assert len(after) == len(before)
    for a, b in zip(after, before, strict=True):
        assert not isinstance(a, jax.core.Tracer)
        np.testing.assert_array_equal(a, b)


def _check(model: nnx.Module, returns_state: bool = False) -> yax.Mox:
    graphdef, state = nnx.split(model)

    def apply(s, x):
        module = nnx.merge(graphdef, s, copy=True)  # the eager run must not update `model`
        y = module(x)
        return (y, nnx.state(module)) if returns_state else y

    before = _values(model)
    mox = yax.make_mox(apply)(state, X)
    _assert_unchanged(model, before)
    expected = apply(nnx.split(model)[1], X)
    got = yax.eval_mox(mox, nnx.split(model)[1], X)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    return mox


def test_shared_modules_and_variables():
    mox = _check(Wrapper(Shared(nnx.Rngs(0))))
    names = [call.name for call in yax.query("//module_call", mox)]
    assert names == ["", "inner", "inner/again", "inner/again", "inner/other"]  # sorted: first


def test_state_updates_and_a_structure_change_inside_a_call():
    model = Wrapper(Sowing(nnx.Rngs(0)))
    mox = _check(model, returns_state=True)
    assert len(yax.query('//module_call[@type="BatchNorm"]', mox)) == 1


def test_raw_array_leaves():
    mox = _check(Wrapper(RawLeaf(nnx.Rngs(0))))
    assert len(yax.query('//module_call[@type="Linear"]', mox)) == 1


def test_a_model_closed_over_gets_its_values_back():
    model = Wrapper(Wrapper(nnx.BatchNorm(4, use_running_average=False, rngs=nnx.Rngs(0))))
    before = _values(model)
    mox = yax.make_mox(lambda x: model(x))(X)
    _assert_unchanged(model, before)
    np.testing.assert_allclose(yax.eval_mox(mox, X), model(X), rtol=1e-6, atol=1e-6)


def test_nested_calls_read_the_models_flattening(monkeypatch):
    from bryo_nnx import _intercept

    flattened = []
    original = _intercept.flat_graph
    monkeypatch.setattr(
        _intercept, "flat_graph", lambda n, **kw: flattened.append(n) or original(n, **kw)
    )
    model = Wrapper(Wrapper(Shared(nnx.Rngs(0))))
    yax.make_mox(lambda x: model(x))(X)
    # once for the outermost call; `other` shares `first`'s bias, met before it, so its
    # own flattening differs from its part of the model's
    assert flattened == [model, model.inner.inner.other]


def test_a_model_merged_inside_the_trace_is_freed_without_the_garbage_collector():
    import gc
    import weakref

    graphdef, state = nnx.split(Wrapper(Shared(nnx.Rngs(0))))
    merged = []

    def apply(s, x):
        module = nnx.merge(graphdef, s)
        merged.append(weakref.ref(module))
        return module(x)

    gc.collect()
    gc.disable()
    try:
        mox = yax.make_mox(apply)(state, X)
        assert merged[0]() is None  # no reference cycle keeps it (and its tracers) alive
    finally:
        gc.enable()
    assert len(yax.query("//module_call", mox)) == 5


def test_recorded_state_leaves_give_the_mox_the_markers_give(monkeypatch):
    """`make_mox` records the state leaves that are variables of its trace instead of
    passing them through the begin markers (bryo_mox's `call_region`), and calls whose
    inputs are all recorded bind no begin marker: with shared Variables, state updates,
    a structure change, raw leaves, and a closed-over model, the MoX is the one every
    leaf and argument through the markers gives."""
    from bryo_mox import _trace

    models = [
        Wrapper(Shared(nnx.Rngs(0))),
        Wrapper(Sowing(nnx.Rngs(0))),
        Wrapper(RawLeaf(nnx.Rngs(0))),
    ]
    closed = Wrapper(Wrapper(nnx.BatchNorm(4, use_running_average=False, rngs=nnx.Rngs(0))))

    def texts() -> list[str]:
        found = [str(_check(model, returns_state=True)) for model in models]
        return [*found, str(yax.make_mox(lambda x: closed(x))(X))]

    recorded = texts()
    monkeypatch.setattr(_trace, "_record", lambda leaves, recording: (None, leaves))
    monkeypatch.setattr(_trace, "_tracing_eqns", lambda trace: None)  # (begin markers too)
    assert recorded == texts()
