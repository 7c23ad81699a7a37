"""What `bryo` command plugins receive: a small facade to add subcommands.

A plugin implementing `bryo_cli_commands(commands)` describes its subcommands with
bryo's own records, never with argparse objects, so bryo may change how it parses the
command line without breaking any plugin:

    from bryo.cli import Argument, Commands
    from bryo_plugins import hookimpl


    def hello(args) -> int:
        print(f"hello, {args.who}")
        return 0


    @hookimpl
    def bryo_cli_commands(commands: Commands) -> None:
        commands.add_command(
            "hello", "say hello", hello, [Argument("who", nargs="?", default="world")]
        )

A name with a space adds a subcommand to a group (`"mox show"`); `add_group` gives the
group its help. The handler gets the parsed arguments as an `argparse.Namespace` (each
argument under its name, `--finetune-steps` as `finetune_steps`) and returns the exit
code (None means 0).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

Handler = Callable[[argparse.Namespace], "int | None"]

_NO_DEFAULT = object()


@dataclass(frozen=True, init=False)
class Argument:
    """One argument of a subcommand: a positional (`"file"`) or an option (`"--to"`, `"-o"`).

    Args:
        *names: `"file"` for a positional, or option strings (`"--output"`, `"-o"`).
        help: one line shown by `--help`.
        type: converts the string given (`int`, `pathlib.Path`).
        default: the value when the argument is not given.
        choices: the values accepted.
        required: an option that must be given.
        flag: an option without a value: True when given, False otherwise.
        nargs: `"?"`, `"*"`, `"+"` or a count, as argparse reads it.
        metavar: the name shown for the value in `--help`.

    Raises:
        ValueError: no name, a positional mixed with options, or a flag that is a
            positional or takes a type, choices or nargs.
    """

    names: tuple[str, ...]
    help: str | None = None
    type: Callable[[str], object] | None = None
    default: object = None
    choices: tuple[object, ...] | None = None
    required: bool = False
    flag: bool = False
    nargs: str | int | None = None
    metavar: str | None = None

    def __init__(
        self,
        *names: str,
        help: str | None = None,
        type: Callable[[str], object] | None = None,
        default: object = None,
        choices: Sequence[object] | None = None,
        required: bool = False,
        flag: bool = False,
        nargs: str | int | None = None,
        metavar: str | None = None,
    ) -> None:
        _check_argument(names, flag, type, choices, nargs)
        values = {
            "names": names,
            "help": help,
            "type": type,
            "default": default,
            "choices": tuple(choices) if choices is not None else None,
            "required": required,
            "flag": flag,
            "nargs": nargs,
            "metavar": metavar,
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)

    @property
    def positional(self) -> bool:
        """Whether this is a positional argument (its one name has no leading dash)."""
        return not self.names[0].startswith("-")

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """Add this argument to an argparse parser (bryo's side of the facade)."""
        if self.flag:
            parser.add_argument(*self.names, action="store_true", help=self.help)
            return
        options: dict[str, object] = {"help": self.help, "default": self.default}
        optional = {"type": self.type, "choices": self.choices, "nargs": self.nargs}
        options.update({key: value for key, value in optional.items() if value is not None})
        if self.metavar is not None:
            options["metavar"] = self.metavar
        if not self.positional:
            options["required"] = self.required
        parser.add_argument(*self.names, **options)  # type: ignore[arg-type]  # `options` holds add_argument's keywords of several types, built up above


def _check_argument(
    names: tuple[str, ...],
    flag: bool,
    type: object,
    choices: object,
    nargs: object,
) -> None:
    if not names or not all(isinstance(name, str) and name for name in names):
        raise ValueError(f"`Argument` needs at least one non-empty name, got {names!r}.")
    dashed = [name.startswith("-") for name in names]
    if not all(dashed) and (len(names) > 1 or any(dashed)):
        raise ValueError(
            f"`Argument{names!r}` mixes a positional with options: give one positional "
            "name (`'file'`) or only option strings (`'--output', '-o'`)."
        )
    if flag and (not all(dashed) or type is not None or choices is not None or nargs is not None):
        raise ValueError(
            f"`Argument{names!r}` is a flag: flags are options (`'--full'`) without "
            "`type`, `choices` or `nargs`."
        )


class Command(NamedTuple):
    """A subcommand a plugin added (see `Commands.add_command`)."""

    name: str
    help: str
    handler: Handler | None
    arguments: tuple[Argument, ...] = ()
    description: str | None = None

    @property
    def is_group(self) -> bool:
        """A group holds subcommands and has no handler of its own."""
        return self.handler is None


@dataclass
class Commands:
    """The facade `bryo_cli_commands` receives: one per plugin, recording its commands.

    bryo builds the `bryo` parser from what every plugin recorded; two plugins adding the
    same command name are reported as a conflict (the first plugin called keeps it).
    """

    added: list[Command] = field(default_factory=list)

    def add_command(
        self,
        name: str,
        help: str,
        handler: Handler,
        arguments: Sequence[Argument] = (),
        *,
        description: str | None = None,
    ) -> None:
        """Add the subcommand `bryo <name>`.

        Args:
            name: the command (`"hello"`), or a group and a command (`"mox show"`).
            help: one line shown by `bryo --help`.
            handler: `handler(args) -> exit code` (None means 0).
            arguments: the command's `Argument`s, in order.
            description: a paragraph shown by `bryo <name> --help`.

        Raises:
            ValueError: an empty name, a handler that is not callable, or an argument
                that is not an `Argument`.
        """
        words = _words(name)
        if not callable(handler):
            raise ValueError(f"`handler` of command {name!r} must be callable, got {handler!r}.")
        bad = [a for a in arguments if not isinstance(a, Argument)]
        if bad:
            raise ValueError(
                f"`arguments` of command {name!r} must be `bryo.cli.Argument`s, got {bad[0]!r}."
            )
        self.added.append(Command(" ".join(words), help, handler, tuple(arguments), description))

    def add_group(self, name: str, help: str) -> None:
        """Add the group `bryo <name>`, whose subcommands are added as `"<name> <command>"`."""
        self.added.append(Command(" ".join(_words(name)), help, None))


def _words(name: str) -> list[str]:
    words = name.split() if isinstance(name, str) else []
    if not words or len(words) > 2:
        raise ValueError(
            f"command name {name!r} must be one word (`'hello'`) or a group and a command "
            "(`'mox show'`)."
        )
    return words
