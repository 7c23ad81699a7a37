"""`dumps`/`loads`/`dump`/`load`: MoX to and from files through serializer plugins.

Loading is safe on untrusted files: it runs under a budget (`Limits`) that bounds the
memory a file can make it allocate, and every malformed file raises
`MoxSerializationError` (or its `MoxLimitError`), never another exception.

Writing and reading pause Python's cyclic garbage collector (`_collector`): they
allocate many small objects that all stay alive until they return, which the collector
would otherwise scan again and again (a third of a load's time on a large model); what
they drop is freed by reference counting, and the collector resumes afterwards.
"""

from __future__ import annotations

import io
import os
from typing import IO, Any, TypeGuard, cast

from bryo_plugins import callback_error

from ._collector import collector_paused
from ._errors import MoxError, MoxLimitError, MoxSerializationError
from ._hooks import Serializer, serializer_for, serializer_plugin
from ._ir import Mox, is_root, set_pickler
from ._limits import Limits, loading, read_file
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
    return _write(serializer_for(format), mox)


def loads(data: str | bytes, format: str = "xml", *, limits: Limits | None = None) -> Mox:
    """Read a MoX written by `dumps`. Safe on untrusted input.

    Args:
        data: the file's text (or bytes).
        format: `"xml"`, `"yson"`, or any installed format.
        limits: the budgets of the load (file size, nesting, node count, array bytes);
            the defaults (`Limits()`) fit files `dumps` writes.

    Raises:
        MoxSerializationError: the file is malformed; `.line`/`.position` (or `.path`)
            say where. `MoxLimitError` (a subclass) when it is over a budget.
    """
    return _read(serializer_for(format), data, limits)


def dump(
    mox: Mox, path: str | os.PathLike[str] | IO[str] | IO[bytes], format: str | None = None
) -> None:
    """Write `mox` to `path`, a file name or a file object open for writing (text or
    binary); the format follows the extension (`.xml`, `.yson`; a file object's `name`)
    unless given."""
    if _is_file(path, "write"):
        data = _write(serializer_for(format, _file_name(path, format)), mox)
        _write_to(path, data)
        return
    path = cast("str | os.PathLike[str]", path)
    data = _write(serializer_for(format, str(path)), mox)
    if isinstance(data, bytes):
        with open(path, "wb") as file:
            file.write(data)
    else:
        with open(path, "w", encoding="utf-8") as file:
            file.write(data)


def load(
    path: str | os.PathLike[str] | IO[str] | IO[bytes],
    format: str | None = None,
    *,
    limits: Limits | None = None,
) -> Mox:
    """Read a MoX from `path`, a file name or a file object open for reading (text or
    binary); the format follows the extension (a file object's `name`) unless given (see
    `loads`). A file object is read up to the size budget (`limits.max_bytes`) and no
    further; a file name is read in chunks and refused (`MoxLimitError`) at the first
    past it, so a huge file or an endless one (`/dev/zero`) is never read whole."""
    if _is_file(path, "read"):
        serializer = serializer_for(format, _file_name(path, format))
        bound = (limits or Limits()).max_bytes
        data = path.read(bound + 1)
        if len(data) > bound:
            raise MoxLimitError(
                f"the file is larger than the size budget ({bound} bytes or characters); "
                "pass `limits=Limits(max_bytes=...)` to read it."
            )
        return _read(serializer, data, limits)
    path = cast("str | os.PathLike[str]", path)
    serializer = serializer_for(format, str(path))
    return _read(serializer, read_file(path, limits), limits)


def _is_file(path: object, method: str) -> TypeGuard[Any]:
    return not isinstance(path, (str, bytes, os.PathLike)) and callable(getattr(path, method, None))


def _file_name(file: Any, format: str | None) -> str | None:
    if format is not None:
        return None
    name = getattr(file, "name", None)
    if not isinstance(name, str):
        raise MoxError(
            f"the file object {type(file).__name__} has no name to take the format from; "
            "pass `format=` (`'xml'`, `'yson'`)."
        )
    return name


def _write_to(file: Any, data: str | bytes) -> None:
    """Write `data` to a text or a binary file object (UTF-8 across)."""
    binary = not isinstance(file, io.TextIOBase) and (
        isinstance(file, (io.RawIOBase, io.BufferedIOBase)) or "b" in getattr(file, "mode", "")
    )
    write: Any = file.write
    if binary:
        write(data.encode("utf-8") if isinstance(data, str) else data)
    else:
        write(data.decode("utf-8") if isinstance(data, bytes) else data)


#: The formats a pickled MoX is written in, in order of preference: YSON holds any
#: string, XML 1.0 not every one.
PICKLE_FORMATS = ("yson", "xml")
#: The fields of a `Mox` besides its block; a pickle carries them as they are (a file
#: drops static leaves, and static keyword arguments it cannot write).
_FIELDS = (
    "in_tree",
    "out_tree",
    "extra_params",
    "kwargs_tree",
    "static_kwargs",
    "static_leaves",
    "in_spec",
    "out_spec",
)


def pickled(mox: Mox) -> tuple[Any, ...]:
    """`mox.__reduce__()`: its block as the text `dumps` writes in the first installed
    format of `PICKLE_FORMATS`, and its other fields as they are.

    Raises:
        MoxSerializationError: the MoX cannot be written (a Python callback, say).
        MoxError: no serializer plugin is installed.
    """
    for format in PICKLE_FORMATS:
        try:
            serializer = serializer_for(format)
        except MoxError:
            continue
        fields = {name: getattr(mox, name) for name in _FIELDS}
        return (_unpickle, (format, _write(serializer, mox), fields))
    raise MoxError(
        f"pickling a Mox needs a serializer plugin ({', '.join(PICKLE_FORMATS)}); install "
        "bryo-serializer-yson or bryo-serializer-xml."
    )


def _unpickle(format: str, data: str | bytes, fields: dict[str, Any]) -> Mox:
    """The MoX `pickled` wrote. A pickle is trusted (unpickling runs code anyway), so the
    size budgets grow with the text; the depth budget stays."""
    size = len(data)
    limits = Limits(
        max_bytes=max(Limits.max_bytes, 4 * size),
        max_nodes=max(Limits.max_nodes, size),
        max_traces=max(Limits.max_traces, size),
        max_trace_ports=max(Limits.max_trace_ports, size),
        max_types=max(Limits.max_types, size),
        max_literals=max(Limits.max_literals, size),
    )
    loaded = _read(serializer_for(format), data, limits)
    return Mox(loaded.block, **fields)


set_pickler(pickled)


def _write(serializer: Serializer, mox: Mox) -> str | bytes:
    if not is_root(mox):
        raise MoxError(f"`mox` must be a Mox, got {type(mox).__name__}.")
    with collector_paused():
        doc = to_document(mox)
        try:
            data = serializer.dumps(doc)
        except (MoxError, RecursionError):  # the serializer's own message to the user
            raise
        except Exception as error:  # (free until it catches) name the plugin
            raise callback_error(
                serializer.dumps,
                role=f"the `{serializer.format}` serializer's dumps",
                plugin=serializer_plugin(serializer),
                hook="bryo_mox_serializers",
                contract="`dumps(doc)` must return the document as str or bytes",
                error=error,
                where="while writing a MoX",
                unchanged="Nothing was written.",
            ) from error
    if not isinstance(data, (str, bytes)):
        raise MoxError(
            f"the `{serializer.format}` serializer's dumps ({_qualified(serializer.dumps)}) "
            f"returned {type(data).__name__}; a serializer's dumps must return str or bytes. "
            "Fix the serializer plugin."
        )
    return data


def _read(serializer: Serializer, data: str | bytes, limits: Limits | None) -> Mox:
    if not isinstance(data, (str, bytes, bytearray, memoryview)):
        raise MoxError(f"`data` must be str or bytes, got {type(data).__name__}.")
    size = len(data)  # in UTF-8, a string has at least as many bytes as characters
    if isinstance(data, str) and size <= (limits or Limits()).max_bytes and not data.isascii():
        size = len(data.encode("utf-8", "surrogatepass"))
    try:
        with loading(size, limits) as budget, collector_paused():
            budget.check_size()  # before the serializer looks at the text
            # the document is freed when `from_document` returns, before the collector
            # resumes (and scans what was allocated meanwhile)
            return from_document(_document(serializer, data))
    except MoxSerializationError:
        raise
    except MoxError as error:
        raise MoxSerializationError(str(error)) from error
    except RecursionError:
        raise MoxSerializationError("the file nests too deeply to read.") from None
    except Exception as error:  # the promise: no other exception type escapes a load
        raise MoxSerializationError(
            f"cannot read the file: {type(error).__name__}: {error}"
        ) from error


def _document(serializer: Serializer, data: str | bytes) -> DocNode:
    try:
        doc = serializer.loads(data)
    except (MoxError, RecursionError):
        raise
    except Exception as error:  # a serializer must say where a file is malformed
        raise MoxSerializationError(
            f"cannot read the file: the `{serializer.format}` serializer's loads "
            f"({_qualified(serializer.loads)}) raised {type(error).__name__}: {error} (a "
            "serializer should raise MoxSerializationError saying where the file is wrong)"
        ) from error
    if not isinstance(doc, DocNode):
        raise MoxError(
            f"the `{serializer.format}` serializer's loads ({_qualified(serializer.loads)}) "
            f"returned {type(doc).__name__}, not a bryo_mox.document.DocNode; fix the "
            "serializer plugin."
        )
    return doc


def _qualified(function: object) -> str:
    """`module.name` of a serializer's function, which names its plugin's module."""
    module = getattr(function, "__module__", None) or "?"
    return f"{module}.{getattr(function, '__qualname__', type(function).__name__)}"
