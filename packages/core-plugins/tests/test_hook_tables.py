"""hook_table and TypeTable: one precedence (the plugin called first wins), conflicts warned
naming both plugins, garbage rejected where it is read, tables (and every `PerEpoch`
value) cached per epoch."""

from __future__ import annotations

import pytest

from bryo_plugins import (
    PerEpoch,
    PluginConflictWarning,
    TypeTable,
    hook_table,
    hookimpl,
    module_roots,
    type_mapping,
)


class Base:
    pass


class Child(Base):
    pass


def _table_plugin(mapping, **opts):
    class Plugin:
        @hookimpl(**opts)
        def bryo_test_table(self):
            return mapping

    return Plugin()


LABELS = type_mapping(lambda value: isinstance(value, str), "a label")


def test_lookup_follows_the_mro_and_the_plugins(bryo_empty_plugin_manager):
    pm = bryo_empty_plugin_manager
    calls = []

    def collect(pm):
        calls.append(pm.epoch)
        return hook_table("bryo_test_table", LABELS, pm=pm)

    table = TypeTable(collect)
    assert table.lookup(Child) is None
    plugin = _table_plugin({Base: "base"})
    pm.register(plugin)
    assert table.lookup(Child) == "base" and table.lookup(Base) == "base"
    assert table.lookup(int) is None
    assert table.types() == (Base,)
    assert len(calls) == 2  # rebuilt once per change, not per lookup
    pm.unregister(plugin)
    assert table.lookup(Child) is None


def test_the_plugin_registered_last_wins_and_the_conflict_names_both(bryo_empty_plugin_manager):
    pm = bryo_empty_plugin_manager
    pm.register(_table_plugin({int: "first", str: "s"}), name="early")
    pm.register(_table_plugin({int: "second"}), name="late")
    with pytest.warns(PluginConflictWarning, match="'late' and 'early' both answer") as record:
        table = hook_table("bryo_test_table", LABELS, pm=pm)
    assert table == {int: "second", str: "s"}
    assert "'late' wins" in str(record[0].message) and "int" in str(record[0].message)


def test_tryfirst_wins_over_registration_order(bryo_empty_plugin_manager):
    pm = bryo_empty_plugin_manager
    pm.register(_table_plugin({int: "eager"}, tryfirst=True), name="eager")
    pm.register(_table_plugin({int: "late"}), name="late")
    with pytest.warns(PluginConflictWarning, match="'eager' wins"):
        assert hook_table("bryo_test_table", LABELS, pm=pm) == {int: "eager"}


def test_a_conflict_warns_once_per_manager(bryo_empty_plugin_manager, recwarn):
    pm = bryo_empty_plugin_manager
    pm.register(_table_plugin({int: "a"}), name="a")
    pm.register(_table_plugin({int: "b"}), name="b")
    hook_table("bryo_test_table", LABELS, pm=pm)
    hook_table("bryo_test_table", LABELS, pm=pm)
    assert len([w for w in recwarn if w.category is PluginConflictWarning]) == 1


@pytest.mark.parametrize(
    ("garbage", "message"),
    [
        (object(), "expected a mapping of types to a label, got object"),
        ({"int": "x"}, "expected types as keys, got 'int'"),
        ({int: 3}, "expected a label for int, got 3"),
    ],
)
def test_garbage_disables_the_plugin_and_the_table_keeps_the_rest(
    bryo_empty_plugin_manager, garbage, message
):
    pm = bryo_empty_plugin_manager
    pm.register(_table_plugin({str: "s"}), name="good")
    pm.register(_table_plugin(garbage), name="bad")
    with pytest.warns(RuntimeWarning, match="'bad' failed in hook `bryo_test_table`"):
        assert hook_table("bryo_test_table", LABELS, pm=pm) == {str: "s"}
    [failure] = pm.failures
    assert failure.name == "bad" and failure.hook == "bryo_test_table"
    assert message in str(failure.error)
    assert pm.get_plugin("bad") is None and pm.is_blocked("bad")  # for the rest of the process
    assert hook_table("bryo_test_table", LABELS, pm=pm) == {str: "s"}
    assert len(pm.failures) == 1


def test_module_roots_are_the_top_level_modules_of_the_mro():
    assert module_roots(Child) == {__name__.partition(".")[0], "builtins"}
    assert module_roots(bool) == {"builtins"}


def test_per_epoch_makes_its_value_once_per_registration_change(bryo_empty_plugin_manager):
    pm = bryo_empty_plugin_manager
    made = []

    def make(pm):
        made.append(pm.epoch)
        return hook_table("bryo_test_table", LABELS, pm=pm)

    table = PerEpoch(make)
    assert table.epoch is None
    assert table.get() == {} and table.get() is table.get()
    assert table.epoch == pm.epoch and len(made) == 1
    plugin = _table_plugin({int: "int"})
    pm.register(plugin)
    assert table.get() == {int: "int"} and len(made) == 2
    table.reset()
    assert table.epoch is None
    assert table.get() == {int: "int"} and len(made) == 3
    pm.unregister(plugin)
    assert table.get() == {}


def test_per_epoch_never_keeps_a_value_made_while_a_plugin_was_registered(
    bryo_empty_plugin_manager,
):
    """Another thread registering a plugin while the value is made: the value made then
    misses it, so it must not be stamped with the epoch that has it (it was, and the
    stale table was kept for good)."""
    late = _table_plugin({int: "int"})

    def make(pm):
        table = hook_table("bryo_test_table", LABELS, pm=pm)
        if pm.get_plugin("late") is None:
            pm.register(late, name="late")  # what another thread does meanwhile
        return table

    memo = PerEpoch(make)
    assert memo.get() == {int: "int"}
    assert memo.get() == {int: "int"}


def test_owners_names_the_plugin_whose_value_won(bryo_empty_plugin_manager):
    pm = bryo_empty_plugin_manager
    pm.register(_table_plugin({int: "first", str: "s"}), name="early")
    pm.register(_table_plugin({int: "second"}), name="late")
    owners = {}
    with pytest.warns(PluginConflictWarning):
        hook_table("bryo_test_table", LABELS, pm=pm, owners=owners)
    assert owners == {int: "late", str: "early"}
