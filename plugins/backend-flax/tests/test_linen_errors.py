"""Linen calls MoX cannot record are errors naming the module, and leave nothing behind:
no tracer in a bound module, no interceptor installed, the next trace works."""

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import errors

yax = pytest.importorskip("bryo_mox")

X = jnp.ones((2, 4))


class SetupDense(nn.Module):
    def setup(self):
        self.dense = nn.Dense(4)

    def __call__(self, xs):
        return self.dense(xs)


ORPHAN = SetupDense(name="orphan")  # created outside any module: never bound


class CallsOrphan(nn.Module):
    @nn.compact
    def __call__(self, xs):
        xs = nn.BatchNorm(use_running_average=False)(xs)  # updates batch_stats first
        return ORPHAN(xs)


def bound_model():
    """`CallsOrphan` bound to its BatchNorm's variables (it cannot be initialized: the
    orphan's call fails), with mutable statistics."""
    stats = nn.BatchNorm(use_running_average=False).init(jax.random.key(0), X)
    variables = {name: {"BatchNorm_0": collection} for name, collection in stats.items()}
    return CallsOrphan().bind(variables, mutable=["batch_stats"])


def assert_clean(bound, before):
    after = jax.tree.map(lambda a: a, bound.variables["batch_stats"])
    for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after), strict=True):
        assert not isinstance(b, jax.core.Tracer)
        np.testing.assert_array_equal(a, b)
    from bryo_flax._linen import _installed

    assert getattr(_installed, "depth", 0) == 0  # the interceptor is gone
    # and the next trace works as usual
    model = SetupDense()
    variables = model.init(jax.random.key(1), X)
    mox = yax.make_mox(model.apply)(variables, X)
    assert [n.name for n in yax.query("//module_call", mox)] == ["", "dense"]
    np.testing.assert_allclose(yax.eval_mox(mox, variables, X), model.apply(variables, X))


def test_a_module_called_outside_apply_is_named():
    bound = bound_model()
    before = jax.tree.map(np.asarray, bound.variables["batch_stats"])
    with pytest.raises(yax.MoxError, match=r"module 'orphan' \(.*SetupDense\) was called outside"):
        yax.make_mox(lambda x: bound(x))(X)
    assert_clean(bound, before)


def test_an_unbound_compact_module_fails_as_in_flax():
    with pytest.raises(errors.CallCompactUnboundModuleError):
        yax.make_mox(lambda x: nn.Dense(3)(x))(X)
    bound = bound_model()
    assert_clean(bound, jax.tree.map(np.asarray, bound.variables["batch_stats"]))


class Fails(nn.Module):
    @nn.compact
    def __call__(self, xs):
        xs = nn.BatchNorm(use_running_average=False)(xs)  # updates batch_stats first
        raise ValueError("the model's own error")


def test_an_error_in_a_call_leaves_the_scopes_as_they_were():
    """`pure` writes the traced state into the scope's variables: an error midway puts
    the old values back before it propagates."""
    stats = nn.BatchNorm(use_running_average=False).init(jax.random.key(0), X)
    variables = {name: {"BatchNorm_0": collection} for name, collection in stats.items()}
    bound = Fails().bind(variables, mutable=["batch_stats"])
    before = jax.tree.map(np.asarray, bound.variables["batch_stats"])
    with pytest.raises(ValueError, match="the model's own error"):
        yax.make_mox(lambda x: bound(x))(X)
    assert_clean(bound, before)


FAILING = {"now": False}  # whether `DropsThenFails` raises, after drawing its mask


class DropsThenFails(nn.Module):
    @nn.compact
    def __call__(self, xs):
        xs = nn.Dropout(0.5, deterministic=False)(nn.Dense(4)(xs))
        if FAILING["now"]:
            raise ValueError("the model's own error")
        return nn.Dense(4)(xs)


def test_an_error_leaves_rngs_counters_and_names_as_they_were():
    """After an error midway (a mask drawn, a compact submodule named), a later call
    draws the same mask and names its submodules as a fresh run."""
    model = DropsThenFails()
    rngs = {"dropout": jax.random.key(3)}
    variables = model.init({"params": jax.random.key(0), **rngs}, X)
    expected = model.apply(variables, X, rngs=rngs)
    bound = model.bind(variables, rngs=rngs)
    FAILING["now"] = True
    try:
        with pytest.raises(ValueError, match="the model's own error"):
            yax.make_mox(lambda x: bound(x))(X)
    finally:
        FAILING["now"] = False
    mox = yax.make_mox(lambda x: bound(x))(X)
    names = [n.name for n in yax.query("//module_call", mox)]
    assert names == ["", "Dense_0", "Dropout_0", "Dense_1"]
    np.testing.assert_allclose(yax.eval_mox(mox, X), expected)
    np.testing.assert_allclose(bound(X), expected)  # the bound scope draws as a fresh one


class DenseThenFails(nn.Module):
    @nn.compact
    def __call__(self, xs):
        xs = nn.Dense(4)(xs)
        if FAILING["now"]:
            raise ValueError("the model's own error")
        return xs


class HoldsFields(nn.Module):
    """Calls the submodules given as its fields; `setup` or compact."""

    first: nn.Module
    second: nn.Module

    @nn.compact
    def __call__(self, xs):
        return self.second(self.first(xs))


class HoldsFieldsInSetup(HoldsFields):
    def setup(self):
        self.head = nn.Dense(4)

    def __call__(self, xs):
        return self.head(self.second(self.first(xs)))


@pytest.mark.parametrize("holder", [HoldsFields, HoldsFieldsInSetup], ids=["compact", "setup"])
def test_an_error_in_a_field_submodule_leaves_the_callers_variables_alone(holder):
    """Field submodules keep the scopes of their first call: an error midway in a trace
    leaves the caller's dicts and arrays in place, and no tracer in the bound module."""
    model = holder(nn.BatchNorm(use_running_average=False), DenseThenFails())
    variables = model.init(jax.random.key(0), X, mutable=True)
    leaves = jax.tree.leaves(variables)
    bound = model.bind(variables, mutable=["batch_stats"])
    bound(X)  # adopts the fields, their scopes take references into `variables`
    params = bound.variables["params"]
    FAILING["now"] = True
    try:
        with pytest.raises(ValueError, match="the model's own error"):
            yax.make_mox(lambda x: bound(x))(X)
    finally:
        FAILING["now"] = False
    assert all(a is b for a, b in zip(jax.tree.leaves(variables), leaves, strict=True))
    assert bound.variables["params"] is params
    assert not any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves(bound.variables))
    stats = jax.tree.map(np.asarray, bound.variables["batch_stats"])
    mox = yax.make_mox(lambda x: bound(x))(X)
    expected, _ = model.apply({**variables, "batch_stats": stats}, X, mutable=["batch_stats"])
    np.testing.assert_allclose(yax.eval_mox(mox, X), expected, rtol=1e-6)


CALLER: dict = {}  # the variables `Peeks` checks; module fields would be frozen copies


class Peeks(nn.Module):
    """Checks, while traced, that the caller's variables still hold their arrays."""

    @nn.compact
    def __call__(self, xs):
        y = nn.Dense(4)(xs)
        if CALLER:
            kernel = CALLER["params"]["Dense_0"]["kernel"]
            assert not isinstance(kernel, jax.core.Tracer), "the caller's variables were written"
        return y


def test_the_callers_variables_are_never_written():
    """Immutable collections are the caller's: MoX writes a call's state into copies."""
    model = Peeks()
    CALLER.update(model.init(jax.random.key(0), X))
    try:
        kernel = CALLER["params"]["Dense_0"]["kernel"]
        mox = yax.make_mox(lambda x: model.apply(CALLER, x))(X)  # closed over, not traced
        assert CALLER["params"]["Dense_0"]["kernel"] is kernel
        np.testing.assert_allclose(yax.eval_mox(mox, X), model.apply(CALLER, X))
    finally:
        CALLER.clear()


class SetupStats(nn.Module):
    def setup(self):
        self.norm = nn.BatchNorm(use_running_average=False)
        self.shift = self.param("shift", nn.initializers.zeros, (4,))  # kept: runs on a copy

    def __call__(self, xs):
        y = self.norm(xs)
        return y + jnp.broadcast_to(self.shift, y.shape)


@pytest.mark.parametrize(
    ("method", "why"),
    [
        (lambda context: context.orig_method.func, "its call did not reach Flax's interceptors"),
        (lambda context: None, "Flax passed no method to re-run"),
    ],
    ids=["bypasses-flax", "no-method"],
)
def test_a_setup_module_whose_method_cannot_be_rerun_is_named(monkeypatch, method, why):
    """A module whose `setup` keeps arrays runs again on a copy: a method run without Flax's wrapper
    (a custom wrapper in its place) never reaches the interceptor again, and a Flax that
    passes no method gives nothing to re-run: MoX refuses the call instead of recording a
    wrong node."""
    import bryo_flax._linen as linen

    monkeypatch.setattr(linen, "unwrapped_method", method)
    bound = SetupStats().bind(SetupStats().init(jax.random.key(0), X), mutable=["batch_stats"])
    before = jax.tree.map(np.asarray, bound.variables["batch_stats"])
    with pytest.raises(yax.MoxError) as raised:
        yax.make_mox(lambda x: bound(x))(X)
    message = str(raised.value)
    assert re.match(r"Linen module '' \(.*SetupStats\)", message)  # the path, the class
    assert f"its method `__call__` cannot be intercepted: {why}" in message
    monkeypatch.undo()
    assert_clean(bound, before)
