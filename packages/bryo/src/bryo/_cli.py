"""The `bryo` command: subcommands come from plugins through `bryo_cli_commands`.

Each plugin gets its own `bryo.cli.Commands` facade; what they all recorded becomes one
argparse parser, whose usage errors are one line (`bryo mox: the following arguments are
required: xpath (see ...)`) with exit code 2. A plugin that raises in the hook, or returns
something, is reported (`bryo plugins` lists it) and the other plugins' commands still work;
two plugins adding the same command name are merged by `bryo_plugins.merge_answers` (the
plugin called first keeps it, a warning names both).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from typing import NoReturn

from bryo_plugins import (
    Answer,
    BryoPluginManager,
    PerPlugin,
    PluginConflictWarning,
    PluginError,
    PluginResultError,
    answers,
    callback_error,
    get_plugin_manager,
    merge_answers,
)

from .cli import Command, Commands

FAMILY = "cli"
HOOK = "bryo_cli_commands"


def _returns_nothing(answer: object) -> None:
    raise PluginResultError(
        f"`{HOOK}` adds commands through `commands.add_command(...)` and returns None; "
        f"it returned {answer!r}"
    )


def collect_commands(
    pm: BryoPluginManager | None = None, owners: dict[str, str] | None = None
) -> dict[str, Command]:
    """Every plugin's commands by name (`"mox show"`), conflicts resolved and warned;
    `owners` receives `name -> the plugin that added it`."""
    pm = get_plugin_manager() if pm is None else pm
    recorded: dict[str, Commands] = {}

    def facade(plugin: str) -> Commands:
        return recorded.setdefault(plugin, Commands())

    answers(HOOK, _returns_nothing, family=FAMILY, pm=pm, commands=PerPlugin(facade))
    found = [
        Answer(plugin, [(command.name, command) for command in commands.added])
        for plugin, commands in recorded.items()
        if not pm.is_blocked(plugin)  # a plugin that failed midway adds nothing
    ]
    return merge_answers(HOOK, found, pm=pm, owners=owners)


def build_parser(pm: BryoPluginManager | None = None) -> argparse.ArgumentParser:
    """The full `bryo` parser, with every plugin's subcommands."""
    parser = argparse.ArgumentParser(
        prog="bryo", description="Neural-network modules as data, for JAX."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    owners: dict[str, str] = {}
    commands = collect_commands(pm, owners)
    pm = get_plugin_manager() if pm is None else pm
    groups: dict[str, argparse._SubParsersAction] = {}
    for name, command in sorted(commands.items(), key=lambda item: len(item[0].split())):
        group_name, _, sub_name = name.partition(" ")
        plugin = _third_party(pm, owners.get(name))
        if not sub_name:
            _add(subparsers, name, command, groups, plugin)
            continue
        if group_name in commands and not commands[group_name].is_group:
            warnings.warn(
                f"`bryo {name}` is left out: `bryo {group_name}` is a command, not a group. "
                "Rename the group or the command.",
                PluginConflictWarning,
                stacklevel=2,
            )
            continue
        if group_name not in groups:  # added without `add_group`: a group without help
            _add(subparsers, group_name, Command(group_name, "", None), groups)
        _add(groups[group_name], sub_name, command, groups, plugin)
    return parser


def _add(
    subparsers: argparse._SubParsersAction,
    name: str,
    command: Command,
    groups: dict[str, argparse._SubParsersAction],
    plugin: str | None = None,
) -> None:
    parser = subparsers.add_parser(
        name, help=command.help, description=command.description or command.help
    )
    _one_line_errors(parser)
    if command.is_group:
        groups[name] = parser.add_subparsers(
            dest=f"{name}_command", metavar="SUBCOMMAND", required=True
        )
        return
    for argument in command.arguments:
        argument.add_to(parser)
    parser.set_defaults(handler=command.handler, **{_PLUGIN: plugin, _NAME: command.name})


# Where a command's parser keeps, for `main`, the third-party plugin that added it (None
# for bryo's own commands, whose errors are their own) and the command's name.
_PLUGIN, _NAME = "_bryo_plugin", "_bryo_command"


def _third_party(pm: BryoPluginManager, plugin: str | None) -> str | None:
    source = pm.sources.get(plugin) if plugin is not None else None
    return None if source is not None and source.builtin else plugin


def _one_line_errors(parser: argparse.ArgumentParser) -> None:
    """Usage errors of `bryo <command> ...` as one line, `bryo <command>: message (see
    `bryo <command> ... --help`)`, exit code 2: never argparse's usage block."""
    prog = " ".join(parser.prog.split()[:2])

    def error(message: str) -> NoReturn:
        parser.exit(2, f"{prog}: {message} (see `{parser.prog} --help`)\n")

    parser.error = error


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `bryo` command; returns its exit code."""
    try:
        parser = build_parser()
    except PluginError as error:
        print(f"bryo: {error}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    plugin = getattr(args, _PLUGIN, None)
    if plugin is None:
        return int(handler(args) or 0)
    try:
        code = handler(args)
    except Exception as error:  # a plugin's command: name the plugin
        raise _handler_error(args, plugin, error=error) from error
    if code is None or isinstance(code, int):
        return int(code or 0)
    raise _handler_error(args, plugin, returned=f"{type(code).__name__} {code!r:.80}")


def _handler_error(
    args: argparse.Namespace,
    plugin: str,
    *,
    error: Exception | None = None,
    returned: str | None = None,
) -> Exception:
    return callback_error(
        args.handler,
        role=f"the handler of `bryo {getattr(args, _NAME)}`",
        plugin=plugin,
        hook=HOOK,
        contract="`handler(args)` gets the parsed `argparse.Namespace` and returns the exit "
        "code, an int (None for 0)",
        error=error,
        returned=returned,
        category=TypeError,
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
