"""The `bryo` command: subcommands come from plugins through `bryo_cli_commands`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bryo_plugins import PluginError, get_plugin_manager


def build_parser() -> argparse.ArgumentParser:
    """The full `bryo` parser, with every plugin's subcommands."""
    parser = argparse.ArgumentParser(
        prog="bryo", description="Neural-network modules as data, for JAX."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    get_plugin_manager().hook.bryo_cli_commands(subparsers=subparsers)
    return parser


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
    return int(handler(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
