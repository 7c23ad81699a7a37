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
