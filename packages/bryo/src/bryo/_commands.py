"""bryo's built-in subcommands, registered as a plugin like any other."""

from __future__ import annotations

import argparse

from bryo_plugins import describe_plugins, get_plugin_manager, hookimpl


def _plugins(args: argparse.Namespace) -> int:
    pm = get_plugin_manager()
    infos = describe_plugins(pm)
    width = max((len(info.name) for info in infos), default=4)
    print(f"{len(infos)} bryo plugin(s) loaded:")
    for info in infos:
        source = f"{info.distribution} {info.version}" if info.distribution else "(registered)"
        print(f"  {info.name:<{width}}  {source}")
        print(f"  {'':<{width}}  hooks: {', '.join(info.hooks) or '-'}")
    for failure in pm.failures:
        print(f"  FAILED {failure}")
    return 1 if pm.failures and args.strict else 0


def _demo(args: argparse.Namespace) -> int:
    from . import _demo  # imports optax and every backend: only when the demo runs

    return _demo.main(args)


@hookimpl
def bryo_cli_commands(subparsers: argparse._SubParsersAction) -> None:
    from ._demo_args import add_demo_arguments

    demo = subparsers.add_parser(
        "demo",
        help="train, trace, rewrite and save a small model: the whole stack at work",
        description="Build a small model with a Stacked trunk, train it on synthetic data, "
        "trace it to MoX, swap its activation, fine-tune LoRA adapters, and save and reload "
        "everything.",
    )
    add_demo_arguments(demo)
    demo.set_defaults(handler=_demo)
    parser = subparsers.add_parser(
        "plugins", help="list the loaded plugins with their distribution, version and hooks"
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a plugin failed to load")
    parser.set_defaults(handler=_plugins)
