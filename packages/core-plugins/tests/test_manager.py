"""The manager: built-ins registered directly, entry points loaded per family and key,
misspelt hooks loud, broken plugins contained, the environment honoured.

Entry points come from real (fake) installed distributions: `bryo_fake_distributions`
writes `*.dist-info` directories that `importlib.metadata` finds like pip-installed ones.
"""

from __future__ import annotations

import sys

import pytest

import bryo_plugins
from bryo_plugins import (
    AUTOLOAD_ENV,
    BLOCK_ENV,
    PluginError,
    PluginSource,
    _manager,
    add_builtin,
    get_plugin_manager,
    hookimpl,
    new_plugin_manager,
    use_plugin_manager,
)

ITEMS = """
    from bryo_plugins import hookimpl

    @hookimpl
    def bryo_test_items(value):
        return value
"""

MISSPELT = """
    from bryo_plugins import hookimpl

    @hookimpl
    def bryo_test_itemz(value):
        return value
"""

BROKEN = """
    raise ZeroDivisionError("boom at import")
"""

REENTRANT = """
    from bryo_plugins import get_plugin_manager

    PM = get_plugin_manager()  # at import time: not allowed while the manager is created
"""


def _names(pm) -> set[str]:
    return {name for name, plugin in pm.list_name_plugin() if plugin is not None}


class Builtin:
    @hookimpl
    def bryo_test_items(self, value):
        return value


@pytest.fixture
def builtins(monkeypatch):
    """Built-ins added inside a test are forgotten after it."""
    monkeypatch.setattr(_manager, "_builtins", list(_manager._builtins))


# --- built-ins ---------------------------------------------------------------------------


def test_builtins_reach_live_and_future_managers_without_metadata(builtins):
    live = new_plugin_manager(load=False)
    plugin = Builtin()
    add_builtin(plugin, name="test-builtin", distribution="bryo-test")
    add_builtin(plugin, name="test-builtin", distribution="bryo-test")  # twice is harmless
    later = new_plugin_manager(load=False)
    for pm in (live, later):
        assert pm.get_plugin("test-builtin") is plugin
        assert pm.sources["test-builtin"] == PluginSource("bryo-test", None, builtin=True)
    assert new_plugin_manager(builtins=False).get_plugin("test-builtin") is None


def test_a_builtin_can_be_blocked(builtins, monkeypatch):
    add_builtin(Builtin(), name="test-builtin", distribution="bryo-test")
    monkeypatch.setenv(BLOCK_ENV, "test-builtin")
    assert "test-builtin" not in _names(new_plugin_manager())


# --- lazy loading per family -------------------------------------------------------------


def test_the_plain_group_loads_with_the_manager(bryo_fake_distributions):
    modules = bryo_fake_distributions.add("acme-eager", {"eager": ITEMS}, version="2.0")
    pm = new_plugin_manager()
    assert pm.get_plugin("eager") is sys.modules[modules["eager"]]
    assert pm.sources["eager"] == PluginSource("acme-eager", "2.0")


def test_a_family_loads_when_it_is_first_needed(bryo_fake_distributions):
    modules = bryo_fake_distributions.add("acme-lazy", {"lazy": ITEMS}, group="bryo.test")
    pm = new_plugin_manager()
    assert modules["lazy"] not in sys.modules
    assert "lazy" in [e.name for e in pm.pending_entries() if e.family == "test"]
    assert not pm.load_family("other")
    assert pm.load_family("test")
    assert pm.get_plugin("lazy") is sys.modules[modules["lazy"]]
    assert not pm.load_family("test")  # once
    assert not [e for e in pm.pending_entries() if e.family == "test"]


def test_keyed_entries_load_for_their_key_and_unkeyed_ones_with_any(bryo_fake_distributions):
    dists = bryo_fake_distributions
    keyed = dists.add("acme-keyed", {"keyed": ITEMS}, group="bryo.test.acme_lib")
    plain = dists.add("acme-plain", {"plain": ITEMS}, group="bryo.test")
    pm = new_plugin_manager()
    assert pm.load_family("test", {"numpy"})
    assert plain["plain"] in sys.modules and keyed["keyed"] not in sys.modules
    assert pm.load_family("test", {"acme_lib"})
    assert "keyed" in _names(pm)


def test_one_plugin_in_several_groups_loads_once(bryo_fake_distributions):
    bryo_fake_distributions.add(
        "acme-multi", {"multi": ITEMS}, groups={"multi": "bryo.test.a, bryo.other.b"}
    )
    pm = new_plugin_manager()
    assert pm.load_family("test")
    assert not pm.load_family("other")  # the same plugin: nothing new
    assert not pm.failures
    assert _names(pm) >= {"multi"}


def test_the_same_name_from_two_distributions_is_reported(bryo_fake_distributions):
    bryo_fake_distributions.add("acme-first", {"clash": ITEMS})
    bryo_fake_distributions.add("acme-second", {"clash": ITEMS})
    with pytest.warns(RuntimeWarning, match="'clash'.*already taken by acme-"):
        pm = new_plugin_manager()
    [failure] = pm.failures
    assert {pm.sources["clash"].distribution, failure.distribution} == {"acme-first", "acme-second"}


def test_a_plugin_failing_to_import_is_recorded_and_not_retried(bryo_fake_distributions):
    bryo_fake_distributions.add("acme-broken", {"broken": BROKEN}, group="bryo.test")
    bryo_fake_distributions.add("acme-fine", {"fine": ITEMS}, group="bryo.test")
    pm = new_plugin_manager()
    with pytest.warns(RuntimeWarning, match=r"'broken' \(distribution acme-broken\).*boom"):
        assert pm.load_family("test")
    [failure] = pm.failures
    assert failure.hook is None and isinstance(failure.error, ZeroDivisionError)
    assert f"{BLOCK_ENV}=broken" in str(failure)
    assert "fine" in _names(pm) and "broken" not in _names(pm)
    assert not pm.load_family("test")


def test_a_misspelt_hook_fails_loudly_on_every_load(bryo_fake_distributions):
    bryo_fake_distributions.add("acme-typo", {"typo": MISSPELT}, group="bryo.test")
    pm = new_plugin_manager()
    for _ in range(2):
        with pytest.raises(PluginError) as info:
            pm.load_family("test")
        message = str(info.value)
        assert "plugin 'typo' implements unknown hook 'bryo_test_itemz'" in message
        assert "did you mean 'bryo_test_items'?" in message
        assert f"{BLOCK_ENV}=typo" in message
        assert "typo" not in _names(pm)


def test_a_plugin_asking_for_the_manager_while_it_is_created_is_reported(
    bryo_fake_distributions, monkeypatch
):
    bryo_fake_distributions.add("acme-reentrant", {"reentrant": REENTRANT})
    monkeypatch.setattr(_manager, "_manager", None)
    with pytest.warns(RuntimeWarning, match="'reentrant'.*get_plugin_manager"):
        pm = get_plugin_manager()
    assert get_plugin_manager() is pm  # one load, no nested second manager
    [failure] = pm.failures
    assert isinstance(failure.error, PluginError)


# --- the environment ---------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_autoload_off_loads_no_entry_point_but_keeps_the_builtins(
    bryo_fake_distributions, builtins, monkeypatch, value
):
    bryo_fake_distributions.add("acme-eager", {"eager": ITEMS})
    bryo_fake_distributions.add("acme-lazy", {"lazy": BROKEN}, group="bryo.test")
    add_builtin(Builtin(), name="test-builtin", distribution="bryo-test")
    monkeypatch.setenv(AUTOLOAD_ENV, value)
    pm = new_plugin_manager()
    pm.load_all()
    assert _names(pm) >= {"test-builtin"}
    assert not {"eager", "lazy"} & _names(pm)
    assert not pm.failures


@pytest.mark.parametrize("blocked", ["lazy", " other , lazy ", "acme-lazy", "ACME_Lazy"])
def test_blocked_plugins_are_never_imported(bryo_fake_distributions, monkeypatch, blocked):
    modules = bryo_fake_distributions.add("acme-lazy", {"lazy": ITEMS}, group="bryo.test")
    monkeypatch.setenv(BLOCK_ENV, blocked)
    pm = new_plugin_manager()
    pm.load_family("test")
    assert "lazy" not in _names(pm) and modules["lazy"] not in sys.modules


# --- the manager itself ------------------------------------------------------------------


def test_epochs_grow_on_every_change_and_never_repeat(bryo_empty_plugin_manager):
    pm = bryo_empty_plugin_manager
    plugin = Builtin()
    seen = [pm.epoch]
    pm.register(plugin, name="p")
    seen.append(pm.epoch)
    pm.unregister(plugin)
    seen.append(pm.epoch)
    seen.append(new_plugin_manager(load=False).epoch)
    assert seen == sorted(set(seen))


def test_use_plugin_manager_restores_the_previous_one():
    outer = get_plugin_manager()
    with use_plugin_manager(new_plugin_manager(load=False)) as inner:
        assert get_plugin_manager() is inner
    assert get_plugin_manager() is outer


def test_the_markers_are_bryos():
    assert bryo_plugins.hookimpl.project_name == bryo_plugins.hookspec.project_name == "bryo"
    assert bryo_plugins.ENTRY_POINT_GROUP == "bryo"


def test_check_pending_catches_a_misspelt_hook_registered_by_hand(bryo_empty_plugin_manager):
    class Typo:
        @hookimpl
        def bryo_test_itemz(self, value):
            return value

    bryo_empty_plugin_manager.register(Typo(), name="by-hand")
    with pytest.raises(PluginError, match="'by-hand' implements unknown hook 'bryo_test_itemz'"):
        bryo_plugins.check_pending(bryo_empty_plugin_manager)
