import pytest

from bryo_mox.testing import ToyBackend


@pytest.fixture
def toy(bryo_plugin_manager):
    bryo_plugin_manager.register(ToyBackend())
    return bryo_plugin_manager
