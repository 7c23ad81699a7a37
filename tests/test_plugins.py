"""bryo's plugin system end to end: discovery through real (fake) installed distributions.

Each test installs tiny distributions with `bryo` entry points into a temporary directory
on `sys.path` (the `fake_dists` fixture of this folder's conftest) and builds a fresh
manager, so the global one is never disturbed.
"""

from __future__ import annotations

import subprocess
import sys

import pluggy
import pytest

import bryo
import bryo._cli
import bryo_plugins
from bryo_plugins import (
    AUTOLOAD_ENV,
    BLOCK_ENV,
    BryoPluginManager,
    PluginError,
    _manager,
    describe_plugins,
    get_plugin_manager,
    hookimpl,
    hookspec,
    new_plugin_manager,
    plugin_failures,
    use_plugin_manager,
)

HELLO = """
    import bryo  # owns the hook below: importing it declares `bryo_cli_commands`
    from bryo_plugins import hookimpl

    def _hello(args):
        print(f"hello, {args.who}")
        return 0

    @hookimpl
    def bryo_cli_commands(subparsers):
        parser = subparsers.add_parser("hello", help="say hello")
        parser.add_argument("who", nargs="?", default="world")
        parser.set_defaults(handler=_hello)
"""

BROKEN = """
    raise ZeroDivisionError("boom at import")
"""

MISSPELT = """
    import bryo
    from bryo_plugins import hookimpl

    @hookimpl
    def bryo_cli_command(subparsers):
        pass
"""

OPTIONAL = """
    from bryo_plugins import hookimpl

    @hookimpl(optionalhook=True)
    def bryo_hook_of_a_package_not_installed(value):
        return value
"""

REENTRANT = """
    from bryo_plugins import get_plugin_manager

    PM = get_plugin_manager()  # at import time: not allowed
"""


def _names(pm: BryoPluginManager) -> set[str]:
    return {name for name, plugin in pm.list_name_plugin() if plugin is not None}


def _fake_failures(pm: BryoPluginManager) -> list[bryo_plugins.PluginFailure]:
    """Failures of this file's fake plugins (other packages of the workspace may be half-built)."""
    return [f for f in pm.failures if f.distribution and f.distribution.startswith("acme-")]


# --- discovery -------------------------------------------------------------------------


def test_entry_point_of_a_fake_distribution_is_discovered(fake_dists):
    modules = fake_dists.add("acme-bryo-hello", {"hello": HELLO}, version="1.2.3")
    pm = new_plugin_manager()
    plugin = pm.get_plugin("hello")
    assert plugin is sys.modules[modules["hello"]]
    assert pm.distributions["hello"] == ("acme-bryo-hello", "1.2.3")
    assert {"cli", "hello"} <= _names(pm)  # bryo's built-in `cli` came the same way
    assert not _fake_failures(pm)


def test_discovered_plugin_adds_a_cli_subcommand(fake_dists, capsys):
    fake_dists.add("acme-bryo-hello", {"hello": HELLO})
    with use_plugin_manager(new_plugin_manager()):
        assert bryo._cli.main(["hello", "plugins"]) == 0
    assert capsys.readouterr().out == "hello, plugins\n"


def test_describe_plugins_names_distribution_version_and_hooks(fake_dists):
    fake_dists.add("acme-bryo-hello", {"hello": HELLO}, version="2.0")
    infos = {info.name: info for info in describe_plugins(new_plugin_manager())}
    assert infos["hello"] == bryo_plugins.PluginInfo(
        "hello", "acme-bryo-hello", "2.0", ("bryo_cli_commands",)
    )
    assert infos["cli"].distribution == "bryo"
    assert infos["cli"].version == bryo.__version__


def test_one_distribution_may_ship_several_plugins(fake_dists):
    fake_dists.add(
        "acme-bryo-pair", {"pair-a": HELLO.replace('"hello"', '"a"'), "pair-b": OPTIONAL}
    )
    pm = new_plugin_manager()
    assert pm.distributions["pair-a"][0] == pm.distributions["pair-b"][0] == "acme-bryo-pair"


def test_entry_point_name_clash_is_reported_not_silently_dropped(fake_dists):
    fake_dists.add("acme-first", {"clash": OPTIONAL})
    fake_dists.add("acme-second", {"clash": OPTIONAL})
    with pytest.warns(RuntimeWarning, match="'clash'.*already taken by acme-"):
        pm = new_plugin_manager()
    winner = pm.distributions["clash"][0]
    [failure] = _fake_failures(pm)
    assert failure.name == "clash"
    assert {winner, failure.distribution} == {"acme-first", "acme-second"}
    assert f"already taken by {winner}" in str(failure.error)


# --- a plugin that raises on import ----------------------------------------------------


def test_broken_plugin_is_reported_and_the_rest_keeps_working(fake_dists, capsys):
    fake_dists.add("acme-broken", {"broken": BROKEN}, version="0.1")
    fake_dists.add("acme-bryo-hello", {"hello": HELLO})
    with pytest.warns(RuntimeWarning, match=r"'broken' \(distribution acme-broken\).*boom"):
        pm = new_plugin_manager()
    [failure] = _fake_failures(pm)
    assert failure.name == "broken"
    assert failure.distribution == "acme-broken"
    assert isinstance(failure.error, ZeroDivisionError)
    assert f"{BLOCK_ENV}=broken" in str(failure)
    assert pm.get_plugin("broken") is None
    assert {"cli", "hello"} <= _names(pm)
    with use_plugin_manager(pm):
        assert failure in plugin_failures()
        assert bryo._cli.main(["hello"]) == 0
        assert bryo._cli.main(["plugins", "--strict"]) == 1
    out = capsys.readouterr().out
    assert "FAILED bryo plugin 'broken' (distribution acme-broken) failed to load" in out
    assert "ZeroDivisionError: boom at import" in out


def test_plugin_calling_get_plugin_manager_at_import_gets_a_clear_error(fake_dists, monkeypatch):
    fake_dists.add("acme-eager", {"eager": REENTRANT})
    monkeypatch.setattr(_manager, "_manager", None)  # force a first, global load
    with pytest.warns(RuntimeWarning, match="'eager'.*get_plugin_manager"):
        pm = get_plugin_manager()
    assert get_plugin_manager() is pm  # one load, no nested second manager
    [failure] = _fake_failures(pm)
    assert isinstance(failure.error, PluginError)
    assert "plugin 'eager' called `get_plugin_manager()` while it was being imported" in str(
        failure.error
    )
    assert "cli" in _names(pm)


# --- check_pending: a misspelt hook ----------------------------------------------------


def test_misspelt_hook_fails_loudly_with_a_suggestion(fake_dists):
    fake_dists.add("acme-typo", {"typo": MISSPELT})
    with pytest.raises(PluginError) as info:
        new_plugin_manager()
    message = str(info.value)
    assert "plugin 'typo' implements unknown hook 'bryo_cli_command'" in message
    assert "did you mean 'bryo_cli_commands'?" in message
    assert f"{BLOCK_ENV}=typo" in message


def test_misspelt_hook_makes_the_cli_exit_2_with_the_error(fake_dists, monkeypatch, capsys):
    fake_dists.add("acme-typo", {"typo": MISSPELT})
    monkeypatch.setattr(_manager, "_manager", None)
    assert bryo._cli.main(["plugins"]) == 2
    assert "unknown hook 'bryo_cli_command'" in capsys.readouterr().err


def test_misspelt_hook_registered_by_hand_is_caught_by_check_pending(bryo_plugin_manager):
    class Typo:
        @hookimpl
        def bryo_cli_comands(self, subparsers):
            pass

    bryo_plugin_manager.register(Typo(), name="by-hand")
    with pytest.raises(PluginError, match="'by-hand' implements unknown hook 'bryo_cli_comands'"):
        _manager._check_pending(bryo_plugin_manager)


def test_optional_hook_of_an_unknown_spec_is_accepted(fake_dists):
    fake_dists.add("acme-optional", {"optional": OPTIONAL})
    pm = new_plugin_manager()
    assert "optional" in _names(pm)


def test_blocking_the_misspelt_plugin_lets_bryo_load(fake_dists, monkeypatch):
    fake_dists.add("acme-typo", {"typo": MISSPELT})
    monkeypatch.setenv(BLOCK_ENV, "typo")
    pm = new_plugin_manager()
    assert pm.is_blocked("typo")
    assert "typo" not in _names(pm)


# --- the environment: autoload off, blocked plugins ------------------------------------


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_autoload_off_loads_builtins_only(fake_dists, monkeypatch, value):
    fake_dists.add("acme-bryo-hello", {"hello": HELLO})
    fake_dists.add("acme-broken", {"broken": BROKEN})
    monkeypatch.setenv(AUTOLOAD_ENV, value)
    pm = new_plugin_manager()
    names = _names(pm)
    assert "hello" not in names
    assert "cli" in names and "backend-nnx" in names  # bryo's own distributions
    assert not _fake_failures(pm)  # the broken one was never imported


@pytest.mark.parametrize("value", ["", "0", "false"])
def test_autoload_stays_on_for_other_values(fake_dists, monkeypatch, value):
    fake_dists.add("acme-bryo-hello", {"hello": HELLO})
    monkeypatch.setenv(AUTOLOAD_ENV, value)
    assert "hello" in _names(new_plugin_manager())


@pytest.mark.parametrize(
    "blocked", ["hello", " other , hello ", "acme-bryo-hello", "ACME_bryo.Hello"]
)
def test_blocked_plugin_is_not_imported(fake_dists, monkeypatch, blocked):
    modules = fake_dists.add("acme-bryo-hello", {"hello": HELLO})
    monkeypatch.setenv(BLOCK_ENV, blocked)
    pm = new_plugin_manager()
    assert "hello" not in _names(pm)
    assert modules["hello"] not in sys.modules
    assert "cli" in _names(pm)


def test_a_builtin_can_be_blocked_too(monkeypatch):
    monkeypatch.setenv(BLOCK_ENV, "cli")
    pm = new_plugin_manager()
    assert "cli" not in _names(pm)
    assert "backend-nnx" in _names(pm)


def test_blocking_a_broken_plugin_silences_it(fake_dists, monkeypatch, recwarn):
    fake_dists.add("acme-broken", {"broken": BROKEN})
    monkeypatch.setenv(BLOCK_ENV, "broken")
    assert not _fake_failures(new_plugin_manager())
    assert not [w for w in recwarn if "broken" in str(w.message)]


# --- hookspecs and the manager itself --------------------------------------------------


class _Specs:
    @hookspec(firstresult=True)
    def bryo_test_double(self, value: int) -> int:
        """Return `value` doubled, or None to pass."""


def test_add_hookspecs_reaches_live_and_future_managers(monkeypatch):
    monkeypatch.setattr(_manager, "_hookspec_modules", list(_manager._hookspec_modules))
    live = new_plugin_manager(load=False)
    bryo_plugins.add_hookspecs(_Specs)
    bryo_plugins.add_hookspecs(_Specs)  # twice is harmless
    later = new_plugin_manager(load=False)

    class Doubler:
        @hookimpl
        def bryo_test_double(self, value):
            return 2 * value

    for pm in (live, later):
        pm.register(Doubler())
        assert pm.hook.bryo_test_double(value=21) == 42
        _manager._check_pending(pm)


def test_epoch_changes_on_every_registration(bryo_empty_plugin_manager):
    pm = bryo_empty_plugin_manager
    plugin = object()
    seen = [pm.epoch]
    pm.register(plugin, name="p")
    seen.append(pm.epoch)
    pm.unregister(plugin)
    seen.append(pm.epoch)
    assert seen == sorted(set(seen))  # strictly increasing


def test_epochs_never_repeat_across_managers(monkeypatch):
    """A cache keyed on the epoch cannot confuse a fresh manager with an older one."""
    monkeypatch.setattr(_manager, "_hookspec_modules", list(_manager._hookspec_modules))
    first = new_plugin_manager(load=False)
    first_epoch = first.epoch
    del first
    second = new_plugin_manager(load=False)  # may even reuse `first`'s id()
    assert second.epoch > first_epoch
    before = second.epoch
    bryo_plugins.add_hookspecs(_Specs)
    assert second.epoch > before  # a new spec may change what hooks answer


def test_hook_markers_are_bryos():
    assert isinstance(hookimpl, pluggy.HookimplMarker)
    assert hookimpl.project_name == hookspec.project_name == "bryo"
    assert bryo_plugins.ENTRY_POINT_GROUP == "bryo"


def test_failed_load_is_not_cached(fake_dists, monkeypatch):
    """A misspelt plugin fails every call (loudly), until it is fixed or blocked."""
    fake_dists.add("acme-typo", {"typo": MISSPELT})
    monkeypatch.setattr(_manager, "_manager", None)
    for _ in range(2):
        with pytest.raises(PluginError):
            get_plugin_manager()
    monkeypatch.setenv(BLOCK_ENV, "typo")
    assert "typo" not in _names(get_plugin_manager())


# --- the pytest fixtures ---------------------------------------------------------------


class _Marker:
    @hookimpl
    def bryo_cli_commands(self, subparsers):
        subparsers.add_parser("marker")


def test_fixture_manager_is_bryos_manager_for_the_test(bryo_plugin_manager):
    assert get_plugin_manager() is bryo_plugin_manager
    assert "cli" in _names(bryo_plugin_manager)
    bryo_plugin_manager.register(_Marker(), name="marker")
    assert "marker" in {info.name for info in describe_plugins()}


def test_fixture_registration_did_not_leak(bryo_plugin_manager):
    """Runs after the test above (files run in order): its plugin is gone."""
    assert bryo_plugin_manager.get_plugin("marker") is None
    assert "marker" not in _names(get_plugin_manager())


def test_empty_fixture_has_specs_but_no_plugins(bryo_empty_plugin_manager):
    assert get_plugin_manager() is bryo_empty_plugin_manager
    assert _names(bryo_empty_plugin_manager) == set()
    assert bryo_empty_plugin_manager.hook.bryo_cli_commands.has_spec()


def test_global_manager_comes_back_after_the_fixtures():
    global_pm = get_plugin_manager()
    with use_plugin_manager(new_plugin_manager(load=False)) as inner:
        assert get_plugin_manager() is inner
    assert get_plugin_manager() is global_pm


def test_pytest_plugin_is_shipped_through_pytest11(pytestconfig):
    assert pytestconfig.pluginmanager.hasplugin("bryo")


@pytest.mark.slow  # a fresh interpreter imports jax and every installed plugin
def test_fixtures_work_in_a_fresh_pytest_process(tmp_path):
    """The `pytest11` entry point makes the fixtures available with no conftest at all."""
    (tmp_path / "test_uses_fixture.py").write_text(
        "from bryo_plugins import get_plugin_manager, hookimpl\n"
        "class P:\n"
        "    @hookimpl\n"
        "    def bryo_cli_commands(self, subparsers):\n"
        "        pass\n"
        "def test_a(bryo_plugin_manager):\n"
        "    bryo_plugin_manager.register(P(), name='p')\n"
        "    assert get_plugin_manager() is bryo_plugin_manager\n"
        "def test_b(bryo_plugin_manager):\n"
        "    assert bryo_plugin_manager.get_plugin('p') is None\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
