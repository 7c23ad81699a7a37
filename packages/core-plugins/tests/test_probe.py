"""probe_plugins: every plugin loaded, every table made, every hook asked once (what
`bryo plugins --strict` fails on), and plugins keyed by modules their types do not come
from reported."""

from __future__ import annotations

import pytest

from bryo_plugins import (
    PerEpoch,
    PluginResultError,
    Probe,
    hook_table,
    hookimpl,
    new_plugin_manager,
    probe_plugins,
    type_mapping,
)

TABLE = """
    from bryo_plugins import hookimpl

    class Widget:
        pass

    Widget.__module__ = "acme_widgets.core"

    @hookimpl
    def bryo_test_table():
        return {Widget: "widget"}
"""


class AnswersAnything:
    @hookimpl
    def bryo_test_first(self, value):
        return "yes"


class PassesOnProbes:
    @hookimpl
    def bryo_test_first(self, value):
        return None if isinstance(value, Probe) else "yes"


class TableOfGarbage:
    @hookimpl
    def bryo_test_table(self):
        return {int: 3}


def _labels(answer):
    return type_mapping(lambda value: isinstance(value, str), "a label")(answer)


def test_a_hook_answering_about_a_probe_fails_and_one_passing_does_not(
    bryo_empty_plugin_manager,
):
    pm = bryo_empty_plugin_manager
    pm.register(AnswersAnything(), name="anything")
    pm.register(PassesOnProbes(), name="careful")
    with pytest.warns(RuntimeWarning, match="'anything' failed in hook `bryo_test_first`"):
        [failure] = probe_plugins(pm)
    assert isinstance(failure.error, PluginResultError)
    assert "answered 'yes' about a probe" in str(failure.error)
    assert pm.is_blocked("anything") and not pm.is_blocked("careful")
    assert probe_plugins(pm) == []  # reported once


def test_tables_are_made_with_their_owners_validation(bryo_empty_plugin_manager):
    pm = bryo_empty_plugin_manager
    table = PerEpoch(lambda pm: hook_table("bryo_test_table", _labels, pm=pm))
    pm.register(TableOfGarbage(), name="garbage")
    with pytest.warns(RuntimeWarning, match="expected a label for int, got 3"):
        [failure] = probe_plugins(pm)
    assert failure.hook == "bryo_test_table"
    assert table.get(pm) == {}


@pytest.mark.parametrize(("key", "reported"), [("acme_widgets", False), ("acme", True)])
def test_a_plugin_keyed_by_another_module_than_its_types_is_reported(
    bryo_fake_distributions, key, reported
):
    bryo_fake_distributions.add("acme-widgets", {"widgets": TABLE}, group=f"bryo.test.{key}")
    pm = new_plugin_manager()
    table = PerEpoch(lambda pm: hook_table("bryo_test_table", _labels, pm=pm))
    assert table.get(pm) == {}  # the plugin is not loaded yet
    if not reported:
        assert probe_plugins(pm) == []
        return
    with pytest.warns(RuntimeWarning, match="keyed by modules none of the types"):
        [failure] = probe_plugins(pm)
    assert "(bryo.test.acme)" in str(failure.error)
    assert "(acme_widgets.core.Widget)" in str(failure.error)
    assert "(bryo.test.acme_widgets)" in str(failure.error)
    assert table.get(pm) == {}


def test_a_table_that_cannot_be_made_is_warned_about_and_the_probe_goes_on(
    bryo_empty_plugin_manager,
):
    def broken(pm):
        raise LookupError("a bug of the table's owner")

    table = PerEpoch(broken)
    bryo_empty_plugin_manager.register(AnswersAnything(), name="anything")
    with pytest.warns(RuntimeWarning) as record:
        failures = probe_plugins(bryo_empty_plugin_manager)
    assert [failure.name for failure in failures] == ["anything"]
    messages = [str(warning.message) for warning in record]
    assert any("could not make PerEpoch(" in m and "LookupError: a bug" in m for m in messages)
    assert table.epoch is None
