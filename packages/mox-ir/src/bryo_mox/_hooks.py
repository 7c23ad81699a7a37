"""Typed access to MoX's hooks, cached on the plugin manager's epoch.

Core code asks here for the active interceptors and the serializer table; plugins are
asked once per registration change, never per traced call. Two hook families load
lazily: `mox` (backends' interceptors, keyed by the backend's top-level module) when
`make_mox` traces, and `serializers` (keyed by format name) on the first `dump`/`load`
of a format.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from bryo_plugins import (
    PerEpoch,
    PluginError,
    PluginResultError,
    answers,
    callable_answer,
    get_plugin_manager,
    hook_table,
)

from ._errors import MoxError

INTERCEPTORS = "mox"
SERIALIZERS = "serializers"


class CallHandler(Protocol):
    """What an interceptor calls instead of a module (see `hookspecs`)."""

    def __call__(
        self,
        info: Any,
        state: Any,
        pure: Callable[..., tuple[Any, Any]],
        write_back: Callable[[Any], None],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> Any: ...


Interceptor = Callable[[CallHandler], contextlib.AbstractContextManager]


@dataclass(frozen=True)
class Serializer:
    """A file format for MoX.

    Attributes:
        format: the name passed as `format=` (`"xml"`).
        extensions: file suffixes chosen by `dump`/`load` (`(".xml",)`).
        dumps: `DocNode -> str | bytes`.
        loads: `str | bytes -> DocNode`, safe on untrusted input.
    """

    format: str
    extensions: tuple[str, ...]
    dumps: Callable[[Any], str | bytes]
    loads: Callable[[str | bytes], Any]


_interceptor = callable_answer("an interceptor `(handler) -> context manager`")


_interceptors: PerEpoch[list[Interceptor]] = PerEpoch(
    # Callable is all that can be checked of a plugin's answer before it is called.
    lambda pm: cast(
        list[Interceptor], [a.value for a in answers("bryo_mox_interceptor", _interceptor, pm=pm)]
    )
)


def interceptors() -> list[Interceptor]:
    """The interceptors of every backend whose module is imported (family `mox`).

    A backend's modules cannot exist before its library is imported, so the `mox`
    plugins keyed by an imported top-level module are all that tracing can need.
    """
    pm = get_plugin_manager()
    pm.load_family(INTERCEPTORS, sys.modules)
    return _interceptors.get(pm)


def _serializer_entries(answer: object) -> list[tuple[str, Serializer]]:
    if isinstance(answer, Serializer | str | bytes) or not isinstance(answer, Sequence):
        raise PluginResultError(f"expected a sequence of `bryo_mox.Serializer`s, got {answer!r}")
    bad = [s for s in answer if not isinstance(s, Serializer)]
    if bad:
        raise PluginResultError(f"expected `bryo_mox.Serializer`s, got {bad[0]!r}")
    for serializer in answer:
        _check_serializer(serializer)
    return [(serializer.format, serializer) for serializer in answer]


def _check_serializer(serializer: Serializer) -> None:
    """Refuse a `Serializer` that would misbehave later: `extensions=".json"` (a string)
    would claim every file ending in `.`, `j`, `s`, `o` or `n`."""
    name = f"the Serializer {serializer.format!r}"
    format = serializer.format
    if not isinstance(format, str) or not format or any(c.isspace() or c == "." for c in format):
        raise PluginResultError(
            f"{name}: `format` must be a name such as 'json', without spaces or dots (it is "
            f"also the entry point's key, bryo.serializers.<format>), got {format!r}"
        )
    extensions = serializer.extensions
    if isinstance(extensions, str) or not isinstance(extensions, tuple | list):
        raise PluginResultError(
            f"{name}: `extensions` must be a tuple of suffixes such as ('.mox.json',), got "
            f"{extensions!r}"
        )
    for extension in extensions:
        if not isinstance(extension, str) or not extension.startswith(".") or extension == ".":
            raise PluginResultError(
                f"{name}: each extension must be a suffix starting with '.', such as "
                f"'.mox.json', got {extension!r}"
            )
    for field in ("dumps", "loads"):
        if not callable(getattr(serializer, field)):
            raise PluginResultError(f"{name}: `{field}` must be a function")


_serializers: PerEpoch[dict[str, Serializer]] = PerEpoch(
    lambda pm: hook_table("bryo_mox_serializers", _serializer_entries, pm=pm)
)


def serializers(formats: Container[str] | None = None) -> dict[str, Serializer]:
    """Registered serializers by format name, after loading the `serializers` plugins
    keyed by `formats` (all of them when None)."""
    pm = get_plugin_manager()
    pm.load_family(SERIALIZERS, formats)
    return _serializers.get(pm)


def serializer_for(format: str | None = None, path: str | None = None) -> Serializer:
    """The serializer named `format`, or the one claiming `path`'s extension.

    Only the serializer plugin keyed by the format (or by a word of the file's
    extensions: `xml` for `model.mox.xml`) is imported first; the others only when that
    one does not answer.
    """
    if format is not None:
        table = serializers({format})
        if format not in table:
            table = serializers()
        if format not in table:
            _check_failed({format}, f"the MoX format {format!r}")
            raise MoxError(
                f"`format` {format!r} has no serializer; installed: "
                f"{', '.join(sorted(table)) or 'none'}. Install bryo-serializer-{format} "
                "or pass one of these."
            )
        return table[format]
    assert path is not None
    name = str(path).lower()
    found = _by_extension(serializers(set(name.split(".")[1:])), name)
    if found is None:
        table = serializers()
        found = _by_extension(table, name)
    if found is None:
        _check_failed(set(name.split(".")[1:]), f"the MoX file {path!s}")
        known: Sequence[str] = sorted(ext for s in table.values() for ext in s.extensions)
        raise MoxError(
            f"`path` {path!s} has no known MoX extension ({', '.join(known) or 'none'}); "
            "pass `format=` explicitly."
        )
    return found


def _check_failed(keys: Container[str], subject: str) -> None:
    """A serializer plugin keyed by one of `keys` failed: say so, rather than that no
    serializer is installed."""
    try:
        get_plugin_manager().check_failed(SERIALIZERS, keys, subject)
    except PluginError as error:
        raise MoxError(str(error)) from error


def _by_extension(table: Mapping[str, Serializer], name: str) -> Serializer | None:
    matches = [(len(ext), s) for s in table.values() for ext in s.extensions if name.endswith(ext)]
    return max(matches, key=lambda m: m[0])[1] if matches else None
