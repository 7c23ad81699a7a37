"""A backend's interceptor that misbehaves, or whose plugin failed, is named by `make_mox`
instead of giving a MoX silently missing that backend's module calls."""

from __future__ import annotations

import contextlib
import sys
import types

import jax.numpy as jnp
import pytest

import bryo_mox
from bryo_mox import MoxError
from bryo_plugins import (
    BLOCK_ENV,
    CallRouter,
    PluginCallbackError,
    PluginError,
    hookimpl,
    new_plugin_manager,
    use_plugin_manager,
)


class Doubler:
    """A module of the library `acme_mox` (as far as bryo can tell: its `__module__`)."""

    __module__ = "acme_mox.layers"

    def __call__(self, x):
        return x * 2


def _interceptor_plugin(interceptor):
    class Backend:
        @hookimpl
        def bryo_mox_interceptor(self):
            return interceptor

    return Backend()


def _raises(handler):
    raise ZeroDivisionError("boom")


@contextlib.contextmanager
def _fails_on_enter(handler):
    raise ZeroDivisionError("boom on enter")
    yield


@pytest.mark.parametrize(
    ("interceptor", "expected"),
    [
        (
            _raises,
            "The interceptor .*_raises\\), from plugin 'acme-mox', hook "
            "`bryo_mox_interceptor`, raised ZeroDivisionError: boom when `make_mox` began",
        ),
        (lambda handler: 42, "The interceptor .* returned int 42, not a context manager"),
        (
            _fails_on_enter,
            "The interceptor \\(entering its context manager\\) .* raised "
            "ZeroDivisionError: boom on enter",
        ),
    ],
)
def test_a_misbehaving_interceptor_is_named(bryo_plugin_manager, interceptor, expected):
    """Each failed inside `make_mox` naming neither plugin nor hook ("'int' object does not
    support the context manager protocol", a bare ZeroDivisionError)."""
    bryo_plugin_manager.register(_interceptor_plugin(interceptor), name="acme-mox")
    with pytest.raises(PluginCallbackError, match=expected) as raised:
        bryo_mox.make_mox(jnp.tanh)(jnp.ones(2))
    assert "`interceptor(handler)` must return a context manager" in str(raised.value)
    assert f"{BLOCK_ENV}=acme-mox" in str(raised.value)
    assert isinstance(raised.value, ZeroDivisionError | MoxError)


FAILS_AT_IMPORT = """
raise ZeroDivisionError("boom")
"""


def test_tracing_modules_of_a_backend_whose_interceptor_plugin_failed_is_refused(
    bryo_fake_distributions, monkeypatch
):
    """It warned once, then gave a MoX without the backend's module calls."""
    monkeypatch.setitem(sys.modules, "acme_mox", types.ModuleType("acme_mox"))
    bryo_fake_distributions.add(
        "acme-mox", {"acme-mox": FAILS_AT_IMPORT}, group="bryo.mox.acme_mox"
    )
    model = Doubler()
    with use_plugin_manager(new_plugin_manager()):
        with pytest.warns(RuntimeWarning, match="'acme-mox'"):
            plain = bryo_mox.make_mox(jnp.tanh)(jnp.ones(2))  # no acme_mox object: traced
        assert bryo_mox.query("//module_call", plain) == []
        for fun, args in [
            (lambda m, x: m(x), (model, jnp.ones(2))),  # the model as an argument
            (model, (jnp.ones(2),)),  # the model itself
            (lambda x: model(x), (jnp.ones(2),)),  # held by a closure
        ]:
            with pytest.raises(PluginError) as raised:
                bryo_mox.make_mox(fun)(*args)
            message = str(raised.value)
            assert "bryo cannot handle the module calls of acme_mox.layers.Doubler" in message
            assert "plugin 'acme-mox' (distribution acme-mox, entry point group" in message
            assert "bryo.mox.acme_mox) failed to load: ZeroDivisionError: boom" in message
            assert f"{BLOCK_ENV}=acme-mox" in message


def test_a_blocked_interceptor_plugin_is_no_failure(bryo_fake_distributions, monkeypatch):
    monkeypatch.setitem(sys.modules, "acme_mox", types.ModuleType("acme_mox"))
    monkeypatch.setenv(BLOCK_ENV, "acme-mox")
    bryo_fake_distributions.add(
        "acme-mox", {"acme-mox": FAILS_AT_IMPORT}, group="bryo.mox.acme_mox"
    )
    with use_plugin_manager(new_plugin_manager()):
        mox = bryo_mox.make_mox(lambda m, x: m(x))(Doubler(), jnp.ones(2))
    assert bryo_mox.query("//module_call", mox) == []


# A backend routing its module calls with a `CallRouter`, whose functions misbehave in turn.


class Scale:
    """A module: `x * factor`; `bad=True` makes its own code raise (the user's bug)."""

    def __init__(self, factor, bad=False):
        self.factor = factor
        self.bad = bad

    def __call__(self, x):
        if self.bad:
            raise ValueError("the model's own bug")
        return x * self.factor


def _routing_plugin(*, info=None, pure_result=None, write_back=None, route_raises=False):
    from bryo_mox.interception import module_info

    def route(handler, call, module, parent, args, kwargs):
        if route_raises:
            raise ZeroDivisionError("route boom")

        def pure(state, *call_args, **call_kwargs):
            out = call(Scale(state, module.bad), *call_args, **call_kwargs)
            return (state, out) if pure_result is None else pure_result(out)

        def store(new_state):
            if write_back is not None:
                write_back(new_state)

        described = module_info(module, "scale", {}) if info is None else info
        return handler(described, module.factor, pure, store, args, kwargs)

    router = CallRouter("scale", route)

    @contextlib.contextmanager
    def intercept(handler):
        with router.patching(Scale), router.active(handler):
            yield

    return _interceptor_plugin(intercept)


def _fails_once():
    calls = []

    def write_back(new_state):  # fails with the traced state; the restore goes through
        calls.append(new_state)
        if len(calls) == 1:
            raise ZeroDivisionError("write_back boom")

    return write_back


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (
            {"route_raises": True},
            "The route of its CallRouter .* raised ZeroDivisionError: "
            "route boom for a call of a Scale",
        ),
        (
            {"pure_result": lambda out: out},
            "The `pure` function .* returned "
            "DynamicJaxprTracer, not a pair `\\(new_state, out\\)` for the module call 'scale'",
        ),
        ({"write_back": _fails_once}, "The `write_back` function .* raised ZeroDivisionError"),
        (
            {"info": "scale"},
            "The interceptor \\(its module-call route\\) .* passed `info` of "
            "type str to `make_mox`'s handler",
        ),
    ],
)
def test_a_misbehaving_route_is_named(bryo_plugin_manager, options, expected):
    """Each failed bare ("route boom"; "not enough values to unpack (expected 2, got 1)";
    "write_back boom"), or named no plugin ("a backend passed `info` of type str")."""
    if "write_back" in options:  # a fresh one for each run
        options = {**options, "write_back": options["write_back"]()}
    bryo_plugin_manager.register(_routing_plugin(**options), name="acme-scale")
    with pytest.raises(PluginCallbackError, match=expected) as raised:
        bryo_mox.make_mox(lambda m, x: m(x))(Scale(jnp.ones(2)), jnp.ones(2))
    assert "from plugin 'acme-scale', hook `bryo_mox_interceptor`" in str(raised.value)


def test_the_model_s_own_error_passes_as_it_is(bryo_plugin_manager):
    bryo_plugin_manager.register(_routing_plugin(), name="acme-scale")
    mox = bryo_mox.make_mox(lambda m, x: m(x))(Scale(jnp.ones(2)), jnp.ones(2))
    assert len(bryo_mox.query("//module_call", mox)) == 1
    with pytest.raises(ValueError, match="the model's own bug") as raised:
        bryo_mox.make_mox(lambda m, x: m(x))(Scale(jnp.ones(2), bad=True), jnp.ones(2))
    assert not isinstance(raised.value, PluginCallbackError)


def test_a_backend_s_own_mox_error_passes_as_it_is(bryo_plugin_manager):
    """A backend telling the user what to change raises a MoxError (Flax NNX's route: a
    module called at the top level changed its state): not named as the plugin's bug."""

    def refuses(new_state):
        raise MoxError("pass the module as an argument")

    bryo_plugin_manager.register(_routing_plugin(write_back=refuses), name="acme-scale")
    with pytest.raises(MoxError, match="pass the module as an argument") as raised:
        bryo_mox.make_mox(lambda m, x: m(x))(Scale(jnp.ones(2)), jnp.ones(2))
    assert not isinstance(raised.value, PluginCallbackError)


def _fails_on_restore(restored, traced):
    """A `write_back` taking the first `traced` states (the trace's), failing after."""
    calls = []

    def write_back(new_state):
        calls.append(new_state)
        if len(calls) > traced:
            restored.append(new_state)
            raise ZeroDivisionError("restore boom")

    return write_back


def test_a_write_back_failing_to_restore_the_model_is_named(bryo_plugin_manager):
    """After tracing, each module called at the top level gets its state back through its
    `write_back`: one failing there surfaced bare ("restore boom"), and the modules
    after it in the list were left holding the trace's values."""
    restored = []
    plugin = _routing_plugin(write_back=_fails_on_restore(restored, traced=2))
    bryo_plugin_manager.register(plugin, name="acme-scale")
    with pytest.raises(PluginCallbackError, match="restore boom") as raised:
        bryo_mox.make_mox(lambda a, b, x: a(x) + b(x))(
            Scale(jnp.ones(2)), Scale(jnp.ones(2)), jnp.ones(2)
        )
    message = str(raised.value)
    assert "from plugin 'acme-scale', hook `bryo_mox_interceptor`" in message
    assert "restoring the state of the module call 'scale' after tracing" in message
    assert len(restored) == 2  # both calls restored, the first failure notwithstanding


def test_a_failing_restore_leaves_the_trace_s_own_error_raised(bryo_plugin_manager):
    """A trace that fails (here: `pure` answers no pair) and whose restore fails too
    raises the first error, with the restore's as a note (it masked it before)."""
    restored = []
    plugin = _routing_plugin(
        pure_result=lambda out: out, write_back=_fails_on_restore(restored, traced=0)
    )
    bryo_plugin_manager.register(plugin, name="acme-scale")
    with pytest.raises(PluginCallbackError, match="not a pair") as raised:
        bryo_mox.make_mox(lambda m, x: m(x))(Scale(jnp.ones(2)), jnp.ones(2))
    assert any("restore boom" in note for note in raised.value.__notes__)
    assert len(restored) == 1
