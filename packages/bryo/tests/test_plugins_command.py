"""The `bryo plugins` command: every loaded plugin with distribution, version and hooks."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import bryo
from bryo._cli import main
from bryo_plugins import AUTOLOAD_ENV, BLOCK_ENV, PluginFailure, hookimpl


class _Greeter:
    @hookimpl
    def bryo_cli_commands(self, subparsers):
        subparsers.add_parser("greet").set_defaults(handler=lambda args: print("hi") or 0)


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
    assert plugins["cli"] == (f"bryo {bryo.__version__}", "hooks: bryo_cli_commands")
    assert plugins["backend-nnx"][0] == "bryo-backend-nnx 0.1.0"


def test_a_plugin_registered_in_a_test_shows_up(bryo_plugin_manager, capsys):
    bryo_plugin_manager.register(_Greeter(), name="greeter")
    assert main(["plugins"]) == 0
    plugins = _plugin_lines(capsys.readouterr().out)
    assert plugins["greeter"] == ("(registered)", "hooks: bryo_cli_commands")
    assert main(["greet"]) == 0
    assert capsys.readouterr().out == "hi\n"


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
    assert plugins["cli"] == (f"bryo {bryo.__version__}", "hooks: bryo_cli_commands")
    assert "backend-nnx" not in plugins  # blocked by its distribution's name
