"""The pytest plugin bryo ships (entry point `pytest11`): isolated plugin managers for tests.

Fixtures:

- `bryo_plugin_manager`: a fresh manager with every declared hookspec and bryo's built-in
  plugins, installed as bryo's manager for the test and discarded after it. Register a
  plugin class inside the test; nothing leaks into the next test.
- `bryo_empty_plugin_manager`: the same, with no plugin loaded at all.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ._manager import BryoPluginManager, new_plugin_manager, use_plugin_manager


@pytest.fixture
def bryo_plugin_manager() -> Iterator[BryoPluginManager]:
    """A fresh, loaded plugin manager that is bryo's manager for this test only."""
    with use_plugin_manager(new_plugin_manager()) as pm:
        yield pm


@pytest.fixture
def bryo_empty_plugin_manager() -> Iterator[BryoPluginManager]:
    """A fresh plugin manager with hookspecs but no plugins, for this test only."""
    with use_plugin_manager(new_plugin_manager(load=False)) as pm:
        yield pm
