"""bryo's built-in subcommands `demo`, `plugins` and `plugin new`: a built-in plugin of
the `bryo` package, registered directly by `bryo/__init__.py`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bryo_plugins import (
    HookInfo,
    PluginInfo,
    describe_hooks,
    describe_plugins,
    get_plugin_manager,
    hookimpl,
    probe_plugins,
)

from .cli import Argument, Commands


def _plugins(args: argparse.Namespace) -> int:
    pm = get_plugin_manager()
    # Every plugin of every family, every hook asked once (the listing shows what bryo could
    # load, and a plugin that only fails when used fails here).
    probe_plugins(pm)
    if args.hooks:
        _print_hooks(describe_hooks(pm))
    else:
        _print_plugins(describe_plugins(pm))
    for failure in pm.failures:
        print(f"  FAILED {failure}")
    return 1 if pm.failures and args.strict else 0


def _print_plugins(infos: list[PluginInfo]) -> None:
    width = max((len(info.name) for info in infos), default=4)
    print(f"{len(infos)} bryo plugin(s) loaded:")
    for info in infos:
        source = f"{info.distribution} {info.version or ''}".rstrip() if info.distribution else ""
        kind = " (built-in)" if info.builtin else ""
        print(f"  {info.name:<{width}}  {source or '(registered)'}{kind}")
        print(f"  {'':<{width}}  hooks: {', '.join(info.hooks) or '-'}")


def _print_hooks(hooks: list[HookInfo]) -> None:
    print(f"{len(hooks)} bryo hook(s):")
    for hook in hooks:
        first = "  (firstresult)" if hook.firstresult else ""
        print(f"  {hook.name}{hook.signature}  [{hook.owner}]{first}")
        print(f"      {hook.summary}")


def _plugin_new(args: argparse.Namespace) -> int:
    from . import _scaffold

    try:
        written = _scaffold.write(args.name, args.kind, args.output)
    except (_scaffold.ScaffoldError, OSError) as error:
        print(f"bryo plugin new: {error}", file=sys.stderr)
        return 2
    folder = written[0].parent
    print(f"wrote a {args.kind} plugin, {args.name}, in {folder}:")
    for path in written:
        print(f"  {path.relative_to(folder)}")
    print(f"next: pip install -e '{folder}[test]' && pytest {folder}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from . import _demo  # imports optax and every backend: only when the demo runs

    return _demo.main(args)


@hookimpl
def bryo_cli_commands(commands: Commands) -> None:
    from ._demo_args import demo_arguments

    commands.add_command(
        "demo",
        "train, trace, rewrite and save a small model: the whole stack at work",
        _demo,
        demo_arguments(),
        description="Build a small model with a Stacked trunk, train it on synthetic data, "
        "trace it to MoX, swap its activation, fine-tune LoRA adapters, and save and reload "
        "everything.",
    )
    commands.add_group("plugin", "write bryo plugins")
    commands.add_command(
        "plugin new",
        "write a complete plugin distribution: pyproject, hook implementation, tests",
        _plugin_new,
        [
            Argument("name", help="the distribution's name (acme-json)"),
            Argument(
                "--kind",
                required=True,
                choices=("serializer", "backend", "cli"),
                help="a MoX file format, a graph backend for module classes, or a command",
            ),
            Argument(
                "--output", "-o", type=Path, default=None, help="the folder (default: ./NAME)"
            ),
        ],
        description="Write a plugin distribution that works and is tested as generated: "
        "its entry point in the right group and key, the hook implementation, and tests "
        "written with bryo_plugins.testing (see docs/plugins.md).",
    )
    commands.add_command(
        "plugins",
        "load every plugin, ask each hook once, and list the plugins with their "
        "distribution, version and hooks (--hooks: every hook)",
        _plugins,
        [
            Argument(
                "--strict",
                flag=True,
                help="exit 1 when a plugin failed to load, raised in a hook or answered garbage",
            ),
            Argument("--hooks", flag=True, help="list every hook with its one-line contract"),
        ],
    )
