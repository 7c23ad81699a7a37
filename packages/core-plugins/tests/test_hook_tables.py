"""TypeTable: hook results cached per plugin-manager epoch."""

from bryo_plugins import TypeTable, hookimpl, hookspec, merge_mappings
from bryo_plugins import add_hookspecs as add


class Specs:
    @hookspec
    def bryo_test_table(self):
        """Types this plugin handles."""


add(Specs)


class Base:
    pass


class Child(Base):
    pass


class Handles:
    @hookimpl
    def bryo_test_table(self):
        return {Base: "base"}


def test_lookup_follows_the_mro_and_the_plugins(bryo_plugin_manager):
    calls = []

    def collect(pm):
        calls.append(pm.epoch)
        return merge_mappings(pm.hook.bryo_test_table())

    table = TypeTable(collect)
    assert table.lookup(Child) is None
    plugin = Handles()
    bryo_plugin_manager.register(plugin)
    assert table.lookup(Child) == "base" and table.lookup(Base) == "base"
    assert table.lookup(int) is None
    assert table.types() == (Base,)
    assert len(calls) == 2  # rebuilt once per change, not per lookup
    bryo_plugin_manager.unregister(plugin)
    assert table.lookup(Child) is None


def test_merge_mappings_later_wins():
    assert merge_mappings([{int: 1}, None, {int: 2, str: 3}]) == {int: 2, str: 3}
