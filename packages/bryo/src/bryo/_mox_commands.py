"""`bryo mox show|query|convert`: MoX files from the terminal, a built-in plugin of the
`bryo` command (registered by `bryo/__init__.py`).

Every problem with the input — a missing or unreadable file, a malformed or hostile MoX
file (named with the line and position, or the YSON path, the serializer reported), an
XPath that does not parse or evaluate, a usage error — is one line on stderr,
`bryo mox: ...`, and exit code 2; never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from bryo_plugins import hookimpl

from .cli import Argument, Commands


class _CommandError(Exception):
    """A problem with the command's input, reported as `bryo mox: <message>`."""


def _load(path: Path) -> Any:
    import bryo_mox as mox

    if not path.exists():
        raise _CommandError(f"{path}: no such file")
    if not path.is_file():
        what = "a folder" if path.is_dir() else "not a regular file (a device, a pipe, ...)"
        raise _CommandError(f"{path}: is {what}; give the path of a MoX file (.mox.xml, .mox.yson)")
    try:
        return mox.load(path)
    except mox.MoxSerializationError as error:
        where = ":".join(str(n) for n in (error.line, error.position) if n is not None)
        tree_path = f" (at path {error.path})" if error.path else ""
        message = f"{error.message}{tree_path}"
        raise _CommandError(f"{path}{':' + where if where else ''}: {message}") from None
    except mox.MoxError as error:
        raise _CommandError(f"{path}: {error}") from None
    except OSError as error:
        raise _CommandError(f"{path}: cannot read it ({error.strerror or error})") from None


def _types(avals: Any) -> str:
    from bryo_mox.document import type_str

    return ", ".join(type_str(a) for a in avals)


def _describe(node: Any) -> str:
    from bryo_mox import ModuleCall
    from bryo_mox.document import DocNode

    kind = type(node).__name__
    if isinstance(node, str):
        return node
    if isinstance(node, ModuleCall):
        attrs = " ".join(f"{k}={v!r}" for k, v in node.attrs.items())
        return f"module_call {node.type.rsplit('.', 1)[-1]} '{node.name}' {attrs}".rstrip()
    if isinstance(node, DocNode):
        attrs = " ".join(f"{k}={v!r}" for k, v in node.attrs.items())
        return f"{node.tag} {attrs}".rstrip()
    name = getattr(node, "primitive", None) or getattr(node, "name", "") or kind
    return str(getattr(name, "name", name))


def _value(result: float | str | bool) -> str:
    """An XPath number, string or boolean as XPath writes it (`3`, `2.5`, `true`)."""
    if isinstance(result, bool):
        return "true" if result else "false"
    if isinstance(result, float) and result.is_integer():
        return str(int(result))
    return str(result)


def tree_lines(node: Any) -> list[str]:
    """The module calls under `node` as an indented tree, with their input and output types."""
    from bryo_mox import ModuleCall

    lines = []
    stack = [(child, 0) for child in reversed(getattr(node, "nodes", ()))]
    while stack:
        child, depth = stack.pop()
        is_call = isinstance(child, ModuleCall)
        if is_call:
            ins, outs = _types(child.in_avals), _types(child.out_avals)
            lines.append(f"{'  ' * depth}{_describe(child)}  ({ins}) -> ({outs})")
        inner = depth + 1 if is_call else depth
        stack.extend((grandchild, inner) for grandchild in reversed(getattr(child, "nodes", ())))
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
        raise _CommandError(str(error)) from None
    if not isinstance(found, list):  # count(...), string(...), a comparison
        print(_value(found))
        return 0
    for node in found:
        print(_describe(node))
    print(f"{len(found)} node(s) match {args.xpath}", file=sys.stderr)
    return 0


def _convert(args: argparse.Namespace) -> int:
    import bryo_mox

    output = _output_path(args.file, args.to, args.output)
    if output.exists() and output.resolve() == args.file.resolve():
        raise _CommandError(f"{output}: converting would overwrite the input; pass --output")
    if output.exists() and not args.force:
        raise _CommandError(f"{output} exists; pass --force to replace it")
    mox = _load(args.file)
    try:
        data = bryo_mox.dumps(mox, format=args.to)
    except bryo_mox.MoxError as error:
        raise _CommandError(f"{args.file}: cannot write it as {args.to}: {error}") from None
    _write_atomically(output, data)
    print(f"wrote {output}")
    return 0


def _output_path(source: Path, format: str, output: str | None) -> Path:
    """Where `convert` writes: `output`, or `<stem>.mox.<format>` beside `source` or in the
    folder `output` names (an existing folder, or any path ending with a slash: created)."""
    name = f"{_stem(source)}.mox.{format}"
    if output is None:
        return source.with_name(name)
    path = Path(output)
    if output.endswith(("/", os.sep)):
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise _CommandError(f"{output}: cannot create it ({error.strerror or error})") from None
    if path.is_dir():
        return path / name
    if not path.parent.is_dir():
        raise _CommandError(
            f"{path}: its folder {path.parent} does not exist (end the path with / to "
            "create a folder)"
        )
    return path


def _write_atomically(path: Path, data: str | bytes) -> None:
    """Write `data` beside `path`, then rename it into place: a failed write leaves the old
    file (or no file) behind, never half of one."""
    raw = data.encode() if isinstance(data, str) else data
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_bytes(raw)
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise _CommandError(f"{path}: cannot write it ({error.strerror or error})") from None


def _stem(path: Path) -> str:
    """`block` of `block.mox.xml`, `block.mox.json` or `block.xml`."""
    name = path.name
    if ".mox." in name:
        return name.partition(".mox.")[0]
    return path.stem


def _run(handler: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        _escape_unprintable(sys.stdout)
        try:
            return handler(args)
        except _CommandError as error:
            print(f"bryo mox: {error}", file=sys.stderr)
            return 2

    return run


def _escape_unprintable(stream: Any) -> None:
    """Print what the terminal's encoding cannot hold (a name read from a file, with bytes
    that are not UTF-8) as backslash escapes, as Python's stderr does, not a traceback."""
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(errors="backslashreplace")


@hookimpl
def bryo_cli_commands(commands: Commands) -> None:
    file = Argument("file", type=Path, help="a MoX file (.mox.xml, .mox.yson, ...)")
    commands.add_group("mox", "show, query and convert MoX files")
    commands.add_command(
        "mox show",
        "print a MoX file's module tree",
        _run(_show),
        [file, Argument("--full", flag=True, help="print every equation (jaxpr form)")],
    )
    commands.add_command(
        "mox query",
        "print the nodes an XPath query selects (or its value: count(...))",
        _run(_query),
        [file, Argument("xpath", help="an XPath 1.0 expression")],
    )
    commands.add_command(
        "mox convert",
        "rewrite a MoX file in another format",
        _run(_convert),
        [
            file,
            Argument(
                "--to",
                required=True,
                metavar="FORMAT",
                help="the format to write: any installed serializer's (xml, yson, ...)",
            ),
            Argument(
                "--output",
                "-o",
                default=None,
                help="the file to write, or a folder (a path ending with / is created)",
            ),
            Argument("--force", flag=True, help="replace the output file if it exists"),
        ],
    )
