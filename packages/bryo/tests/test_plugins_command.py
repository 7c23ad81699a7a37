"""The `bryo` command and its plugins: `bryo plugins` (every plugin with distribution,
version and hooks; `--hooks`: every hook with its contract), and the `Commands` facade
plugins add subcommands through."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

import bryo
from bryo._cli import main
from bryo.cli import Argument, Commands
from bryo_plugins import AUTOLOAD_ENV, BLOCK_ENV, PluginConflictWarning, PluginFailure, hookimpl


class _Greeter:
    @hookimpl
    def bryo_cli_commands(self, commands: Commands) -> None:
        commands.add_command(
            "greet",
            "say hi",
            lambda args: print(f"hi {args.who}{'!' if args.loud else ''}") or 0,
            [Argument("who", nargs="?", default="you"), Argument("--loud", flag=True)],
        )


class _Raises:
    @hookimpl
    def bryo_cli_commands(self, commands: Commands) -> None:
        commands.add_command("half", "never added", lambda args: 0)
        raise RuntimeError("boom in bryo_cli_commands")


class _ReturnsGarbage:
    @hookimpl
    def bryo_cli_commands(self, commands: Commands) -> object:
        return "a parser, perhaps"


def _plugin_lines(out: str) -> dict[str, tuple[str, str]]:
    """`{name: (source, hooks)}` from the command's output."""
    lines = out.splitlines()
    plugins = {}
    for line, hooks in zip(lines[1::2], lines[2::2], strict=False):
        if line.lstrip().startswith("FAILED"):
            break
        name, _, source = line.strip().partition("  ")
        plugins[name] = (source.strip(), hooks.strip())
    return plugins


def test_lists_builtins_with_distribution_version_and_hooks(bryo_plugin_manager, capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    count = len([n for n, p in bryo_plugin_manager.list_name_plugin() if p is not None])
    assert out.startswith(f"{count} bryo plugin(s) loaded:\n")
    plugins = _plugin_lines(out)
    assert plugins["cli"] == (f"bryo {bryo.__version__} (built-in)", "hooks: bryo_cli_commands")
    assert plugins["core-graph"][0] == "bryo-core-graph 0.1.0 (built-in)"
    assert plugins["backend-nnx"][0] == "bryo-backend-nnx 0.1.0"  # loaded for the listing


def test_hooks_lists_every_hook_with_its_contract(bryo_plugin_manager, capsys):
    assert main(["plugins", "--hooks"]) == 0
    out = capsys.readouterr().out
    assert "bryo_cli_commands(commands)  [bryo.hookspecs]" in out
    assert "bryo_filter_predicate(filter)  [bryo_filters.hookspecs]  (firstresult)" in out
    assert "Turn `filter`, a literal the core does not know, into a predicate" in out


def test_a_plugin_registered_in_a_test_adds_a_command(bryo_plugin_manager, capsys):
    bryo_plugin_manager.register(_Greeter(), name="greeter")
    assert main(["plugins"]) == 0
    plugins = _plugin_lines(capsys.readouterr().out)
    assert plugins["greeter"] == ("(registered)", "hooks: bryo_cli_commands")
    assert main(["greet", "bryo", "--loud"]) == 0
    assert capsys.readouterr().out == "hi bryo!\n"


@pytest.mark.parametrize(
    ("plugin", "error"),
    [(_Raises(), "boom in bryo_cli_commands"), (_ReturnsGarbage(), "returns None")],
)
def test_a_failing_cli_plugin_is_reported_and_the_command_keeps_working(
    bryo_plugin_manager, capsys, plugin, error
):
    bryo_plugin_manager.register(_Greeter(), name="greeter")
    bryo_plugin_manager.register(plugin, name="acme-cli")
    with pytest.warns(RuntimeWarning, match="'acme-cli' failed in hook `bryo_cli_commands`"):
        assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "FAILED bryo plugin 'acme-cli' failed in hook `bryo_cli_commands`" in out
    assert error in out
    assert main(["plugins", "--strict"]) == 1
    with pytest.raises(SystemExit):  # a plugin that failed midway adds no command at all
        main(["half"])
    assert main(["greet"]) == 0


def test_two_plugins_adding_one_command_warn_naming_both(bryo_plugin_manager, capsys):
    bryo_plugin_manager.register(_Greeter(), name="first")

    class Other:
        @hookimpl
        def bryo_cli_commands(self, commands: Commands) -> None:
            commands.add_command("greet", "other greeting", lambda args: print("other") or 0)

    bryo_plugin_manager.register(Other(), name="second")
    with pytest.warns(PluginConflictWarning, match="'second' and 'first'.*'second' wins"):
        assert main(["greet"]) == 0
    assert capsys.readouterr().out == "other\n"


def test_failures_are_printed_and_strict_exits_1(bryo_plugin_manager, capsys):
    bryo_plugin_manager.failures.append(PluginFailure("acme", "acme-dist", ImportError("nope")))
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "  FAILED bryo plugin 'acme' (distribution acme-dist) failed to load: " in out
    assert "ImportError: nope" in out
    assert main(["plugins", "--strict"]) == 1


def test_strict_exits_0_without_failures(bryo_empty_plugin_manager):
    # The empty manager has no `plugins` command: register bryo's own CLI plugin into it.
    import bryo._commands

    bryo_empty_plugin_manager.register(bryo._commands, name="cli")
    assert main(["plugins", "--strict"]) == 0


def test_no_command_prints_help(bryo_plugin_manager, capsys):
    assert main([]) == 2
    assert "plugins" in capsys.readouterr().out


def test_grouped_commands(bryo_plugin_manager, capsys, tmp_path):
    class Grouped:
        @hookimpl
        def bryo_cli_commands(self, commands: Commands) -> None:
            commands.add_group("tool", "a group of commands")
            commands.add_command(
                "tool size", "print a file's size", _size, [Argument("file", type=Path)]
            )

    def _size(args: argparse.Namespace) -> int:
        print(args.file.stat().st_size)
        return 0

    bryo_plugin_manager.register(Grouped(), name="grouped")
    (tmp_path / "f").write_text("abc")
    assert main(["tool", "size", str(tmp_path / "f")]) == 0
    assert capsys.readouterr().out == "3\n"
    with pytest.raises(SystemExit):
        main(["tool"])  # a group needs a subcommand


@pytest.mark.parametrize(
    ("names", "options", "message"),
    [
        ((), {}, "at least one non-empty name"),
        (("file", "--file"), {}, "mixes a positional with options"),
        (("file",), {"flag": True}, "is a flag"),
        (("--full",), {"flag": True, "type": int}, "is a flag"),
    ],
)
def test_bad_arguments_are_refused_with_the_rule(names, options, message):
    with pytest.raises(ValueError, match=message):
        Argument(*names, **options)


def test_bad_commands_are_refused_with_the_rule():
    commands = Commands()
    with pytest.raises(ValueError, match="one word"):
        commands.add_command("a b c", "too deep", lambda args: 0)
    with pytest.raises(ValueError, match="`handler` of command 'x' must be callable"):
        commands.add_command("x", "no handler", None)  # type: ignore[arg-type]  # the wrong type on purpose: the error is what is tested
    with pytest.raises(ValueError, match=r"must be `bryo\.cli\.Argument`s"):
        commands.add_command("x", "argparse style", lambda args: 0, ["--flag"])  # type: ignore[list-item]  # the wrong type on purpose: the error is what is tested
    assert commands.added == []


def _run_bryo(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in (AUTOLOAD_ENV, BLOCK_ENV)}
    return subprocess.run(
        [sys.executable, "-m", "bryo", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **env},
    )


@pytest.mark.slow  # a fresh interpreter imports jax and every installed plugin
def test_python_dash_m_bryo_plugins():
    result = _run_bryo("plugins", **{BLOCK_ENV: "bryo-backend-nnx"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].endswith("bryo plugin(s) loaded:")
    plugins = _plugin_lines(result.stdout)
    assert plugins["cli"] == (f"bryo {bryo.__version__} (built-in)", "hooks: bryo_cli_commands")
    assert "backend-nnx" not in plugins  # blocked by its distribution's name


def _boom(args):
    raise ZeroDivisionError("boom")


@pytest.mark.parametrize(
    ("handler", "expected"),
    [
        (_boom, "raised ZeroDivisionError: boom"),
        (lambda args: "done", "returned str 'done'"),  # was: invalid literal for int()
    ],
)
def test_a_plugin_command_that_fails_is_named(bryo_plugin_manager, handler, expected):
    """A plugin's handler raising surfaced as its bare error; one returning a string as
    "invalid literal for int() with base 10"; neither named the plugin or the command."""
    from bryo_plugins import PluginCallbackError

    class Hello:
        @hookimpl
        def bryo_cli_commands(self, commands: Commands) -> None:
            commands.add_group("acme", "acme's commands")
            commands.add_command("acme hello", "say hello", handler)

    bryo_plugin_manager.register(Hello(), name="hello")
    with pytest.raises(PluginCallbackError) as raised:
        main(["acme", "hello"])
    message = str(raised.value)
    assert "The handler of `bryo acme hello`" in message
    assert "from plugin 'hello', hook `bryo_cli_commands`" in message
    assert expected in message
    assert "returns the exit code, an int (None for 0)" in message
    assert f"{BLOCK_ENV}=hello" in message


def test_a_plugin_command_may_exit_with_its_code(bryo_plugin_manager):
    class Exits:
        @hookimpl
        def bryo_cli_commands(self, commands: Commands) -> None:
            commands.add_command("bye", "exit 3", lambda args: sys.exit(3))
            commands.add_command("three", "return 3", lambda args: 3)

    bryo_plugin_manager.register(Exits(), name="exits")
    with pytest.raises(SystemExit, match="3"):
        main(["bye"])
    assert main(["three"]) == 3
