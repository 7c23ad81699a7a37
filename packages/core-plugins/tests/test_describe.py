"""What `bryo plugins` shows: plugins with their source, hooks with their contract."""

from bryo_plugins import PluginInfo, PluginSource, describe_hooks, describe_plugins, hookimpl


class Items:
    @hookimpl
    def bryo_test_items(self, value):
        return value


def test_plugins_are_described_with_their_source_and_hooks(bryo_empty_plugin_manager):
    pm = bryo_empty_plugin_manager
    pm.register(Items(), name="items")
    pm.sources["items"] = PluginSource("acme-items", "1.2", builtin=True)
    pm.register(Items(), name="by-hand")
    assert describe_plugins(pm) == [
        PluginInfo("by-hand", None, None, ("bryo_test_items",)),
        PluginInfo("items", "acme-items", "1.2", ("bryo_test_items",), builtin=True),
    ]


def test_hooks_are_described_with_owner_signature_and_first_sentence(bryo_empty_plugin_manager):
    hooks = {hook.name: hook for hook in describe_hooks()}
    first = hooks["bryo_test_first"]
    assert first.owner == "TestSpecs"
    assert first.signature == "(value)"
    assert first.summary == "An answer for `value`, or None to pass."
    assert first.firstresult and not hooks["bryo_test_items"].firstresult
