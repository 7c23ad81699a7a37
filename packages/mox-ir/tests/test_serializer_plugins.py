"""A serializer plugin gone wrong is named where it matters: a format whose plugin failed
is not "not installed", and a serializer breaking its contract (dumps returning neither
text nor bytes, loads raising something other than `MoxSerializationError`) is named by
its function."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

import bryo_mox
from bryo_mox import MoxError, MoxSerializationError, Serializer
from bryo_mox.document import DocNode
from bryo_plugins import BLOCK_ENV, hookimpl, new_plugin_manager, use_plugin_manager


def _mox():
    return bryo_mox.make_mox(jnp.tanh)(jnp.ones(3))


def _plugin(dumps, loads):
    class Broken:
        @hookimpl
        def bryo_mox_serializers(self):
            return [Serializer("brk", (".brk",), dumps, loads)]

    return Broken()


def _returns_int(doc):
    return 42


def _raises_value_error(data):
    raise ValueError("nope")


def _returns_a_dict(data):
    return {"tag": "mox"}


def test_dumps_returning_neither_text_nor_bytes_is_named(bryo_plugin_manager):
    """It was handed to the caller as it was (`dumps` returned 42; `dump` then failed
    writing it, and `loads(42)` said "`data` must be str or bytes")."""
    bryo_plugin_manager.register(_plugin(_returns_int, _raises_value_error), name="broken")
    with pytest.raises(MoxError, match=r"`brk` serializer's dumps \(.*_returns_int\) returned int"):
        bryo_mox.dumps(_mox(), format="brk")


def test_loads_raising_another_error_names_the_serializer(bryo_plugin_manager):
    """It said "cannot read the file: ValueError: nope", naming neither format nor plugin."""
    bryo_plugin_manager.register(_plugin(lambda doc: "x", _raises_value_error), name="broken")
    with pytest.raises(MoxSerializationError) as raised:
        bryo_mox.loads("x", format="brk")
    message = str(raised.value)
    assert "the `brk` serializer's loads" in message
    assert f"({__name__}._raises_value_error) raised ValueError: nope" in message
    assert isinstance(raised.value.__cause__, ValueError)


def test_loads_returning_something_else_than_a_document_is_named(bryo_plugin_manager):
    bryo_plugin_manager.register(_plugin(lambda doc: "x", _returns_a_dict), name="broken")
    with pytest.raises(MoxSerializationError, match=r"_returns_a_dict\) returned dict, not a"):
        bryo_mox.loads("x", format="brk")
    assert DocNode  # what it should have returned


FAILS_AT_IMPORT = """
    raise ZeroDivisionError("boom at import")
"""


def test_a_format_whose_plugin_failed_names_the_plugin(bryo_fake_distributions, tmp_path):
    """It said "`format` 'brk' has no serializer; installed: ... Install
    bryo-serializer-brk", of a format whose plugin is installed and broken."""
    bryo_fake_distributions.add(
        "acme-brk", {"acme-brk": FAILS_AT_IMPORT}, group="bryo.serializers.brk"
    )
    mox = _mox()
    with use_plugin_manager(new_plugin_manager()):
        with pytest.warns(RuntimeWarning, match="'acme-brk'"):
            with pytest.raises(MoxError) as raised:
                bryo_mox.dumps(mox, format="brk")
        message = str(raised.value)
        assert "bryo cannot handle the MoX format 'brk'" in message
        assert "plugin 'acme-brk' (distribution acme-brk, entry point group" in message
        assert "bryo.serializers.brk) failed to load: ZeroDivisionError: boom" in message
        assert f"{BLOCK_ENV}=acme-brk" in message
        with pytest.raises(MoxError, match=r"cannot handle the MoX file .*model\.brk"):
            bryo_mox.dump(mox, tmp_path / "model.brk")
        assert bryo_mox.loads(bryo_mox.dumps(mox, format="xml"), format="xml")  # the rest works
        with pytest.raises(MoxError, match="'nope' has no serializer"):  # unrelated formats
            bryo_mox.dumps(mox, format="nope")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"extensions": ".brk"}, "`extensions` must be a tuple of suffixes"),
        ({"extensions": ("brk",)}, "each extension must be a suffix starting with '.'"),
        ({"format": "my format"}, "`format` must be a name such as 'json'"),
        ({"dumps": "x"}, "`dumps` must be a function"),
    ],
)
def test_a_malformed_serializer_is_refused_naming_the_plugin(bryo_plugin_manager, fields, message):
    """`extensions=".brk"` (a string) was accepted and claimed every file whose name ends
    in `.`, `b`, `r` or `k` (`checkpoint.tar` was read as `brk`)."""
    values = {"format": "brk", "extensions": (".brk",), "dumps": str, "loads": str, **fields}

    class Malformed:
        @hookimpl
        def bryo_mox_serializers(self):
            return [Serializer(**values)]

    bryo_plugin_manager.register(Malformed(), name="malformed")
    with pytest.warns(RuntimeWarning, match="'malformed' failed in hook `bryo_mox_serializers`"):
        with pytest.raises(MoxError, match="has no serializer"):
            bryo_mox.dumps(_mox(), format="nope")
    [failure] = bryo_plugin_manager.failures
    assert message in str(failure.error)


def test_a_dumps_that_raises_is_named_with_its_plugin(bryo_plugin_manager):
    """It raised its bare error from inside `dumps`."""
    from bryo_plugins import PluginCallbackError

    def dumps(doc):
        raise ZeroDivisionError("boom")

    class Brk:
        @hookimpl
        def bryo_mox_serializers(self):
            return [Serializer("brk", (".brk",), dumps, lambda data: None)]

    bryo_plugin_manager.register(Brk(), name="acme-brk")
    with pytest.raises(PluginCallbackError) as raised:
        bryo_mox.dumps(_mox(), format="brk")
    message = str(raised.value)
    assert "The `brk` serializer's dumps" in message
    assert (
        "from plugin 'acme-brk', hook `bryo_mox_serializers`, raised ZeroDivisionError" in message
    )
    assert "while writing a MoX. `dumps(doc)` must return the document as str or bytes" in message
    assert isinstance(raised.value, ZeroDivisionError)
