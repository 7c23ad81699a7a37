"""`dumps`/`loads`/`dump`/`load`: MoX to and from files through serializer plugins."""

from __future__ import annotations

import os
from pathlib import Path

from ._errors import MoxError
from ._hooks import serializer_for
from ._ir import Mox
from ._load import from_document
from .document import DocNode, to_document


def dumps(mox: Mox, format: str = "xml") -> str | bytes:
    """Serialize `mox` to text in `format` (`"xml"`, `"yson"`, or any installed format).

    Equation params, module attributes, wiring, types, constants and custom derivative
    rules are written, so that `loads(dumps(mox))` evaluates like `mox`.

    Raises:
        MoxSerializationError: a param cannot be written (a Python callback, say); the
            message names the equation.
    """
    if not isinstance(mox, Mox):
        raise MoxError(f"`mox` must be a Mox, got {type(mox).__name__}.")
    return serializer_for(format).dumps(to_document(mox))


def loads(data: str | bytes, format: str = "xml") -> Mox:
    """Read a MoX written by `dumps`. Safe on untrusted input; errors carry the position."""
    doc = serializer_for(format).loads(data)
    if not isinstance(doc, DocNode):
        raise MoxError(f"the `{format}` serializer returned {type(doc).__name__}, not a DocNode.")
    return from_document(doc)


def dump(mox: Mox, path: str | os.PathLike[str], format: str | None = None) -> None:
    """Write `mox` to `path`; the format follows the extension (`.xml`, `.yson`) unless given."""
    serializer = serializer_for(format, str(path))
    data = serializer.dumps(to_document(mox))
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(path, mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as file:
        file.write(data)


def load(path: str | os.PathLike[str], format: str | None = None) -> Mox:
    """Read a MoX from `path`; the format follows the extension unless given."""
    serializer = serializer_for(format, str(path))
    doc = serializer.loads(Path(path).read_bytes())
    return from_document(doc)
