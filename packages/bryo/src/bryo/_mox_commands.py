"""`bryo mox show|query|convert`: MoX files from the terminal, a plugin of the `bryo` command.

Errors name the file, and for a malformed file the line and position the serializer
reported; the exit code is 2 for a bad file or argument.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from bryo_plugins import hookimpl

FORMATS = ("xml", "yson")


class _CommandError(Exception):
    """A problem with the command's input, reported as `bryo mox: <message>`."""


def _load(path: Path) -> Any:
    import bryo_mox as mox

    if not path.is_file():
        raise _CommandError(f"{path}: no such file")
    try:
        return mox.load(path)
    except mox.MoxSerializationError as error:
        where = ":".join(str(n) for n in (error.line, error.position) if n is not None)
        raise _CommandError(f"{path}{':' + where if where else ''}: {error}") from None
    except mox.MoxError as error:
        raise _CommandError(f"{path}: {error}") from None


def _types(avals: Any) -> str:
    from bryo_mox._types import type_str

    return ", ".join(type_str(a) for a in avals)


def _describe(node: Any) -> str:
    kind = type(node).__name__
    if kind == "ModuleCall":
        attrs = " ".join(f"{k}={v!r}" for k, v in node.attrs.items())
        return f"module_call {node.type.rsplit('.', 1)[-1]} '{node.name}' {attrs}".rstrip()
    name = getattr(node, "primitive", None) or getattr(node, "name", "") or kind
    return str(getattr(name, "name", name))


def tree_lines(node: Any, depth: int = 0) -> list[str]:
    """The module calls of `node` as an indented tree, with their input and output types."""
    lines = []
    for child in getattr(node, "nodes", ()):
        if type(child).__name__ != "ModuleCall":
            lines.extend(tree_lines(child, depth))
            continue
        ins, outs = _types(child.in_avals), _types(child.out_avals)
        lines.append(f"{'  ' * depth}{_describe(child)}  ({ins}) -> ({outs})")
        lines.extend(tree_lines(child, depth + 1))
    return lines


def _show(args: argparse.Namespace) -> int:
    mox = _load(args.file)
    if args.full:
        print(mox)
        return 0
    lines = tree_lines(mox)
    print(f"{args.file}: {len(lines)} module call(s)")
    print("\n".join(lines) if lines else "(no module calls; use --full for the equations)")
    return 0


def _query(args: argparse.Namespace) -> int:
    import bryo_mox

    mox = _load(args.file)
    try:
        found = bryo_mox.query(args.xpath, mox)
    except bryo_mox.MoxError as error:
        raise _CommandError(f"XPath {args.xpath!r}: {error}") from None
    for node in found:
        print(_describe(node))
    print(f"{len(found)} node(s) match {args.xpath}", file=sys.stderr)
    return 0


def _convert(args: argparse.Namespace) -> int:
    import bryo_mox

    mox = _load(args.file)
    output = args.output or args.file.with_name(_stem(args.file) + f".mox.{args.to}")
    if output.resolve() == args.file.resolve():
        raise _CommandError(f"{output}: converting would overwrite the input; pass --output")
    bryo_mox.dump(mox, output, format=args.to)
    print(f"wrote {output}")
    return 0


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".mox.xml", ".mox.yson", ".xml", ".yson"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def _run(handler: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except _CommandError as error:
            print(f"bryo mox: {error}", file=sys.stderr)
            return 2

    return run


@hookimpl
def bryo_cli_commands(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("mox", help="show, query and convert MoX files")
    commands = parser.add_subparsers(dest="mox_command", metavar="SUBCOMMAND", required=True)
    show = commands.add_parser("show", help="print a MoX file's module tree")
    show.add_argument("file", type=Path)
    show.add_argument("--full", action="store_true", help="print every equation (jaxpr form)")
    show.set_defaults(handler=_run(_show))
    query = commands.add_parser("query", help="print the nodes an XPath query selects")
    query.add_argument("file", type=Path)
    query.add_argument("xpath")
    query.set_defaults(handler=_run(_query))
    convert = commands.add_parser("convert", help="rewrite a MoX file in another format")
    convert.add_argument("file", type=Path)
    convert.add_argument("--to", choices=FORMATS, required=True)
    convert.add_argument("--output", "-o", type=Path, default=None)
    convert.set_defaults(handler=_run(_convert))
