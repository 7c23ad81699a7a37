"""The markers' spelling of bryo 0.1's first layout keeps working, with a warning."""

import pytest

import bryo_plugins
import bryo_pytree


@pytest.mark.parametrize("name", ["hookimpl", "hookspec"])
def test_the_old_marker_spelling_is_a_deprecated_alias(name):
    with pytest.warns(DeprecationWarning, match=f"`bryo_pytree.{name}` moved to `bryo_plugins"):
        marker = getattr(bryo_pytree, name)
    assert marker is getattr(bryo_plugins, name)


def test_other_plugin_names_are_not_aliased():
    with pytest.raises(AttributeError, match="no attribute 'get_plugin_manager'"):
        bryo_pytree.get_plugin_manager  # noqa: B018
