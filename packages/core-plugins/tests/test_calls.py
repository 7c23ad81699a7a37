"""answers and first_answer: one plugin at a time, so that a raising plugin or a garbage
answer is named, disabled and listed, and the other plugins still answer."""

from __future__ import annotations

import sys

import pytest

from bryo_plugins import (
    PerPlugin,
    PluginFailure,
    PluginResultError,
    PluginSource,
    answers,
    callable_answer,
    first_answer,
    first_answer_for,
    hookimpl,
    plugin_failures,
)


def _is_int(answer):
    if not isinstance(answer, int):
        raise PluginResultError(f"expected an int, got {answer!r}")
    return answer


class Doubles:
    @hookimpl
    def bryo_test_items(self, value):
        return 2 * value

    @hookimpl
    def bryo_test_first(self, value):
        return 2 * value if value > 0 else None


class Passes:
    @hookimpl
    def bryo_test_items(self):  # implementations may take a subset of the arguments
        return None

    @hookimpl
    def bryo_test_first(self, value):
        return None


class Raises:
    @hookimpl
    def bryo_test_items(self, value):
        raise ZeroDivisionError("boom in a hook")

    @hookimpl
    def bryo_test_first(self, value):
        raise ZeroDivisionError("boom in a hook")


class Garbage:
    @hookimpl
    def bryo_test_items(self, value):
        return "not an int"


def test_answers_come_in_call_order_without_nones(bryo_empty_plugin_manager):
    pm = bryo_empty_plugin_manager
    pm.register(Doubles(), name="doubles")
    pm.register(Passes(), name="passes")

    class Triples:
        @hookimpl
        def bryo_test_items(self, value):
            return 3 * value

    pm.register(Triples(), name="triples")
    found = answers("bryo_test_items", _is_int, value=2)
    assert [(a.plugin, a.value) for a in found] == [("triples", 6), ("doubles", 4)]


@pytest.mark.parametrize(
    ("plugin", "error"), [(Raises(), "ZeroDivisionError: boom"), (Garbage(), "expected an int")]
)
def test_a_failing_plugin_is_named_disabled_and_listed(bryo_empty_plugin_manager, plugin, error):
    pm = bryo_empty_plugin_manager
    pm.register(Doubles(), name="doubles")
    pm.register(plugin, name="acme")
    pm.sources["acme"] = PluginSource("acme-dist", "1.0")
    with pytest.warns(RuntimeWarning, match=r"'acme' \(distribution acme-dist\) failed in hook"):
        found = answers("bryo_test_items", _is_int, value=1)
    assert [a.plugin for a in found] == ["doubles"]
    [failure] = plugin_failures()
    assert failure == PluginFailure("acme", "acme-dist", failure.error, "bryo_test_items")
    assert error in str(failure)
    assert "disabled for the rest of the process" in str(failure)
    assert pm.get_plugin("acme") is None
    assert [a.plugin for a in answers("bryo_test_items", _is_int, value=1)] == ["doubles"]


def test_first_answer_skips_passing_and_failing_plugins(bryo_empty_plugin_manager):
    pm = bryo_empty_plugin_manager
    pm.register(Doubles(), name="doubles")
    pm.register(Passes(), name="passes")
    pm.register(Raises(), name="raises")
    with pytest.warns(RuntimeWarning, match="'raises'"):
        answer = first_answer("bryo_test_first", _is_int, value=4)
    assert (answer.plugin, answer.value) == ("doubles", 8)
    assert first_answer("bryo_test_first", _is_int, value=-1) is None


def test_an_undeclared_hook_has_no_answers(bryo_empty_plugin_manager):
    assert answers("bryo_test_no_such_hook", _is_int) == []
    assert first_answer("bryo_test_no_such_hook", _is_int) is None


def test_per_plugin_arguments_tell_the_host_who_answered(bryo_empty_plugin_manager):
    pm = bryo_empty_plugin_manager

    class Echo:
        @hookimpl
        def bryo_test_items(self, value):
            return value

    pm.register(Echo(), name="one")
    pm.register(Echo(), name="two")
    found = answers("bryo_test_items", str, value=PerPlugin(lambda plugin: f"for {plugin}"))
    assert [a.value for a in found] == ["for two", "for one"]


def test_hook_wrappers_are_not_called(bryo_empty_plugin_manager):
    pm = bryo_empty_plugin_manager

    class Wrapper:
        @hookimpl(wrapper=True)
        def bryo_test_items(self, value):
            raise AssertionError("bryo calls plain implementations only")
            yield  # a generator, as pluggy requires of wrappers

    pm.register(Wrapper(), name="wrapper")
    pm.register(Doubles(), name="doubles")
    assert [a.value for a in answers("bryo_test_items", _is_int, value=1)] == [2]


def test_first_answer_for_loads_the_family_keyed_by_the_arguments_classes(
    bryo_empty_plugin_manager, monkeypatch
):
    pm = bryo_empty_plugin_manager
    loaded = []
    monkeypatch.setattr(pm, "load_family", lambda family, keys=None: loaded.append(keys))
    pm.register(Passes(), name="passes")
    pm.register(Doubles(), name="doubles")
    assert first_answer_for("bryo_test_first", _is_int, family="test", value=4) == 8
    assert loaded == [{"builtins"}]
    assert first_answer_for("bryo_test_first", _is_int, family="test", value=-1) is None
    assert loaded[-1] is None  # nobody answered: the whole family was loaded and asked


def test_first_answer_for_asks_the_plugins_of_imported_modules_before_the_rest(
    bryo_empty_plugin_manager, monkeypatch
):
    """A value no plugin keyed by its class's module knows (an int, a name): the plugins keyed by
    modules already imported answer it before the family's other plugins are imported
    (Haliax's plugin is not imported to resolve the axis name `'Time'`)."""
    pm = bryo_empty_plugin_manager
    loaded = []

    def load_family(family, keys=None):
        loaded.append(keys)
        if keys is sys.modules:  # the plugin of an imported module answers
            pm.register(Doubles(), name="doubles")
            return True
        return False

    monkeypatch.setattr(pm, "load_family", load_family)
    assert first_answer_for("bryo_test_first", _is_int, family="test", value=4) == 8
    assert loaded == [{"builtins"}, sys.modules]  # the rest of the family was not loaded


def test_callable_answer_names_what_was_expected(bryo_empty_plugin_manager):
    validate = callable_answer("a predicate `(path, value) -> bool`")
    assert validate(len) is len
    with pytest.raises(
        PluginResultError, match=r"expected a predicate `\(path, value\) -> bool`, got 3"
    ):
        validate(3)
