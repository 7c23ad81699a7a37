"""Hooks of the `bryo` command: plugins add subcommands here.

Hook family `cli`: entry points in group `bryo.cli` are imported when the `bryo` command
builds its parser (never by library code). bryo's own commands (`demo`, `plugins`,
`mox ...`) are built-in plugins registered by `bryo/__init__.py`.
"""

from __future__ import annotations

from bryo_plugins import PerPlugin, add_probe_arguments, hookspec

from .cli import Commands


@hookspec
def bryo_cli_commands(commands: Commands) -> None:
    """Add subcommands to the `bryo` command through `commands.add_command`.

    `commands` is a `bryo.cli.Commands` facade, one per plugin; return None:

        commands.add_command(
            "hello", "say hello", lambda args: print("hello") or 0,
            [Argument("--loud", flag=True, help="shout")],
        )

    A name with a space adds to a group (`"mox show"`, after `commands.add_group("mox",
    help)`). Two plugins adding the same name are a conflict: the plugin called first keeps
    it, and a warning names both.
    """


# `bryo plugins` asks every hook once (`probe_plugins`): each plugin gets its own facade.
add_probe_arguments("bryo_cli_commands", commands=PerPlugin(lambda plugin: Commands()))
