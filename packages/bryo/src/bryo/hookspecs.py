"""Hooks of the `bryo` command: plugins add subcommands here."""

from __future__ import annotations

import argparse

from bryo_plugins import hookspec


@hookspec
def bryo_cli_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add subcommands to the `bryo` command.

    Call `subparsers.add_parser(name, help=...)` and set the parser's default `handler`
    to a function taking the parsed `argparse.Namespace` and returning an exit code:

        parser = subparsers.add_parser("hello", help="say hello")
        parser.set_defaults(handler=lambda args: print("hello") or 0)
    """
