"""callback_error: a function a plugin supplied, failing later, is named with its plugin."""

from __future__ import annotations

import pytest

from bryo_plugins import PluginCallbackError, PluginError, PluginSource, callback_error


def unflatten(cls, aux, children):
    raise KeyError("left")


def _error(pm, **kwargs):
    defaults = {
        "role": "the `unflatten` of NodeType(acme.Pair)",
        "plugin": "acme",
        "hook": "bryo_graph_node_types",
        "contract": "`unflatten(cls, aux, children)` must return the rebuilt node",
        "where": "while rebuilding the node at outer",
        "unchanged": "Your model is unchanged.",
        "pm": pm,
    }
    return callback_error(unflatten, **{**defaults, **kwargs})


def test_a_raised_error_is_named_and_keeps_its_type(bryo_empty_plugin_manager):
    pm = bryo_empty_plugin_manager
    pm.sources["acme"] = PluginSource("acme-bryo", "1.0")
    cause = KeyError("left")
    error = _error(pm, error=cause)
    assert isinstance(error, PluginCallbackError) and isinstance(error, PluginError)
    assert isinstance(error, KeyError)  # `except KeyError` around the call still catches it
    assert str(error) == (  # unquoted, though a KeyError
        f"The `unflatten` of NodeType(acme.Pair) ({__name__}.unflatten), from plugin 'acme' "
        "(distribution acme-bryo), hook `bryo_graph_node_types`, raised KeyError: 'left' while "
        "rebuilding the node at outer. `unflatten(cls, aux, children)` must return the "
        "rebuilt node. Your model is unchanged. If the error says what to change in your "
        "code, do that; otherwise it is a bug in that plugin (acme-bryo): fix or report it, "
        "or set BRYO_BLOCK_PLUGINS=acme to go on without it."
    )


def test_a_wrong_answer_is_named_as_a_bug_of_the_category_asked(bryo_empty_plugin_manager):
    error = _error(bryo_empty_plugin_manager, returned="None", category=ValueError)
    assert isinstance(error, PluginCallbackError) and isinstance(error, ValueError)
    assert "), from plugin 'acme', hook `bryo_graph_node_types`, returned None while " in str(error)
    assert "It is a bug in that plugin (acme): fix or report it" in str(error)
    assert type(_error(bryo_empty_plugin_manager, returned="None")) is PluginCallbackError


def test_an_unknown_plugin_is_said_so(bryo_empty_plugin_manager):
    unknown = _error(bryo_empty_plugin_manager, plugin=None, error=ValueError("x"))
    assert "from a plugin's `bryo_graph_node_types`" in str(unknown)
    assert "BRYO_BLOCK_PLUGINS" not in str(unknown)


@pytest.mark.parametrize("cause", [ValueError("v"), RuntimeError("r"), TypeError("t")])
def test_the_classes_are_made_once_per_type(bryo_empty_plugin_manager, cause):
    first = _error(bryo_empty_plugin_manager, error=cause)
    assert type(first) is type(_error(bryo_empty_plugin_manager, error=cause))
