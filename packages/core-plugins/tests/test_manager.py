"""The manager: built-ins registered directly, entry points loaded per family and key,
misspelt hooks loud, broken plugins contained, the environment honoured.

Entry points come from real (fake) installed distributions: `bryo_fake_distributions`
writes `*.dist-info` directories that `importlib.metadata` finds like pip-installed ones.
"""

from __future__ import annotations

import sys
import threading
import types

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

EXITS = """
    import sys

    sys.exit("a plugin calling sys.exit at import")
"""

INTERRUPTED = """
    raise KeyboardInterrupt
"""

# Imported slowly, announcing it: other threads ask for its family meanwhile.
SLOW = """
    import sys
    import time

    from bryo_plugins import hookimpl

    sys.modules["_bryo_test_gate"].importing.set()
    time.sleep(0.3)

    @hookimpl
    def bryo_test_items(value):
        return value
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


def test_a_plugin_exiting_at_import_is_recorded_and_the_process_lives_on(
    bryo_fake_distributions,
):
    bryo_fake_distributions.add("acme-exits", {"exits": EXITS}, group="bryo.test")
    bryo_fake_distributions.add("acme-fine", {"fine": ITEMS}, group="bryo.test")
    pm = new_plugin_manager()
    with pytest.warns(RuntimeWarning, match=r"'exits' \(distribution acme-exits\).*SystemExit"):
        assert pm.load_family("test")
    [failure] = pm.failures
    assert isinstance(failure.error, SystemExit)
    assert "fine" in _names(pm) and "exits" not in _names(pm)


def test_ctrl_c_while_a_plugin_imports_still_interrupts(bryo_fake_distributions):
    bryo_fake_distributions.add("acme-slow", {"interrupted": INTERRUPTED}, group="bryo.test")
    pm = new_plugin_manager()
    with pytest.raises(KeyboardInterrupt):
        pm.load_family("test")
    assert not pm.failures


def test_a_misspelt_hook_disables_its_plugin_naming_it(bryo_fake_distributions):
    bryo_fake_distributions.add("acme-typo", {"typo": MISSPELT}, group="bryo.test")
    bryo_fake_distributions.add("acme-fine", {"fine": ITEMS}, group="bryo.test")
    pm = new_plugin_manager()
    with pytest.warns(RuntimeWarning, match="'typo' \\(distribution acme-typo\\) failed to load"):
        assert pm.load_family("test")
    [failure] = pm.failures
    assert isinstance(failure.error, PluginError)
    message = str(failure)
    assert "plugin 'typo' implements unknown hook 'bryo_test_itemz'" in message
    assert "did you mean 'bryo_test_items'?" in message
    assert f"{BLOCK_ENV}=typo" in message
    assert "typo" not in _names(pm) and pm.is_blocked("typo")
    assert "fine" in _names(pm)  # the rest of its family loaded
    assert not pm.load_family("test")  # not retried: one report
    assert len(pm.failures) == 1


def test_a_misspelt_hook_of_the_plain_group_leaves_the_manager_working(
    bryo_fake_distributions,
):
    bryo_fake_distributions.add("acme-typo", {"typo": MISSPELT})
    with pytest.warns(RuntimeWarning, match="unknown hook 'bryo_test_itemz'"):
        pm = new_plugin_manager()
    assert [failure.name for failure in pm.failures] == ["typo"]


def test_a_hook_of_a_package_not_imported_yet_says_to_import_it(
    bryo_fake_distributions, monkeypatch
):
    """A backend implementing `bryo_scan_*` hooks, loaded while bryo_scan is not imported
    (a graph lookup from a script that imports bryo_graph only), was told its hook is
    unknown with no hint that the hook is spelt right and only its package is missing."""
    monkeypatch.delitem(sys.modules, "bryo_lateowner", raising=False)
    site = bryo_fake_distributions.root
    (site / "bryo_lateowner.py").write_text("")  # installed, not imported
    source = """
        from bryo_plugins import hookimpl

        @hookimpl
        def bryo_lateowner_things():
            return []
    """
    bryo_fake_distributions.add("acme-late", {"late": source}, group="bryo.test")
    pm = new_plugin_manager()
    with pytest.warns(RuntimeWarning, match="unknown hook 'bryo_lateowner_things'"):
        pm.load_family("test")
    message = str(pm.failures[0])
    assert "looks like `bryo_lateowner`, installed but not imported" in message
    assert "add `import bryo_lateowner` to the plugin module" in message
    assert ".." not in message  # the error's own full stop is not doubled


FAILS_FOR_ACME = """
    raise ZeroDivisionError("boom at import")
"""


def _acme_table():
    return bryo_plugins.TypeTable(
        lambda pm: bryo_plugins.hook_table(
            "bryo_test_table", bryo_plugins.type_mapping(str.__instancecheck__, "a label"), pm=pm
        ),
        family="test",
    )


def test_a_class_whose_plugin_failed_is_refused_naming_the_plugin(bryo_fake_distributions):
    """A model of a backend that failed to load was taken for a plain value (a graph
    lookup answered None): `split` handed the model back as one leaf, after a warning."""
    bryo_fake_distributions.add(
        "acme-broken", {"broken": FAILS_FOR_ACME}, group="bryo.test.acme_lib"
    )
    table = _acme_table()
    acme = type("Widget", (), {"__module__": "acme_lib.widgets"})
    with use_plugin_manager(new_plugin_manager()) as pm:
        assert table.lookup(int) is None  # classes of other modules: no plugin, no error
        with pytest.warns(RuntimeWarning, match="'broken'"):
            with pytest.raises(PluginError) as raised:
                table.lookup(acme)
        message = str(raised.value)
        assert "bryo cannot handle acme_lib.widgets.Widget" in message
        assert "plugin 'broken' (distribution acme-broken, entry point group " in message
        assert "bryo.test.acme_lib) failed to load: ZeroDivisionError: boom at import" in message
        assert f"{BLOCK_ENV}=broken" in message
        with pytest.raises(PluginError):  # every time, not only the first
            table.lookup(acme)
        assert pm.failures_for("test", {"acme_lib"}) == pm.failures
        assert pm.failures_for("test", {"other"}) == []
        subclass = type("Gadget", (acme,), {"__module__": "user_code"})
        with pytest.raises(PluginError, match=r"user_code\.Gadget"):  # found along the MRO
            table.lookup(subclass)


def test_a_class_whose_plugin_failed_in_its_hook_is_refused(bryo_fake_distributions):
    source = """
        from bryo_plugins import hookimpl

        @hookimpl
        def bryo_test_table():
            raise RuntimeError("hook exploded")
    """
    bryo_fake_distributions.add("acme-raises", {"raises": source}, group="bryo.test.acme_lib")
    table = _acme_table()
    acme = type("Widget", (), {"__module__": "acme_lib.widgets"})
    with use_plugin_manager(new_plugin_manager()):
        with pytest.warns(RuntimeWarning, match="'raises'"):
            with pytest.raises(PluginError, match="failed in hook `bryo_test_table`: Runtime"):
                table.lookup(acme)


def test_a_blocked_plugin_leaves_its_classes_to_the_core(bryo_fake_distributions, monkeypatch):
    bryo_fake_distributions.add(
        "acme-broken", {"broken": FAILS_FOR_ACME}, group="bryo.test.acme_lib"
    )
    monkeypatch.setenv(BLOCK_ENV, "broken")
    acme = type("Widget", (), {"__module__": "acme_lib.widgets"})
    with use_plugin_manager(new_plugin_manager()) as pm:
        assert _acme_table().lookup(acme) is None
        assert not pm.failures


@pytest.fixture
def gate(monkeypatch):
    """`importing`: set by the SLOW plugin when its import starts."""
    module = types.ModuleType("_bryo_test_gate")
    module.importing = threading.Event()  # type: ignore[attr-defined]  # a test's own module
    monkeypatch.setitem(sys.modules, "_bryo_test_gate", module)
    return module


def test_a_thread_asking_for_a_family_another_thread_loads_waits_for_it(
    bryo_fake_distributions, gate
):
    """Two threads need one backend: the second used to go on without it (its family
    looked loaded), and got no answer from the plugin still being imported."""
    bryo_fake_distributions.add("acme-slow", {"slow": SLOW}, group="bryo.test.acme_lib")
    pm = new_plugin_manager()
    first = threading.Thread(target=pm.load_family, args=("test", {"acme_lib"}))
    first.start()
    assert gate.importing.wait(30)
    found = bryo_plugins.answers(
        "bryo_test_items", lambda x: x, family="test", keys={"acme_lib"}, pm=pm, value=7
    )
    first.join()
    assert [(answer.plugin, answer.value) for answer in found] == [("slow", 7)]
    assert not pm.failures


def test_a_type_table_lookup_during_another_threads_load_sees_the_plugin(
    bryo_fake_distributions, gate
):
    source = (
        SLOW
        + """
    @hookimpl
    def bryo_test_table():
        return {sys.modules["_bryo_test_gate"].Widget: "from slow"}
    """
    )
    bryo_fake_distributions.add("acme-slow", {"slow": source}, group="bryo.test.acme_lib")
    table = bryo_plugins.TypeTable(
        lambda pm: bryo_plugins.hook_table(
            "bryo_test_table", bryo_plugins.type_mapping(str.__instancecheck__, "a label"), pm=pm
        ),
        family="test",
    )
    acme = gate.Widget = type("Widget", (), {"__module__": "acme_lib.widgets"})
    with use_plugin_manager(new_plugin_manager()) as pm:
        table.lookup(int)  # the table exists, made before the plugin loads
        first = threading.Thread(target=pm.load_family, args=("test", {"acme_lib"}))
        first.start()
        assert gate.importing.wait(30)
        assert table.lookup(acme) == "from slow"
        first.join()


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
