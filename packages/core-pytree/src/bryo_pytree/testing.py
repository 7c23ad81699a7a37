"""Alias of `bryo_plugins.testing`, the pytest fixtures for plugin managers.

Kept so that `pytest_plugins = ["bryo_pytree.testing"]` (the spelling of bryo 0.1's first
layout) keeps working; new code should name `bryo_plugins.testing`. Enable one of the two,
not both.
"""

from bryo_plugins.testing import FakeDistributions as FakeDistributions
from bryo_plugins.testing import bryo_empty_plugin_manager as bryo_empty_plugin_manager
from bryo_plugins.testing import bryo_fake_distributions as bryo_fake_distributions
from bryo_plugins.testing import bryo_plugin_manager as bryo_plugin_manager
