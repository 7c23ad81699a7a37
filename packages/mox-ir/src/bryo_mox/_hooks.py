"""Typed access to MoX's hooks, cached on the plugin manager's epoch.

Core code asks here for the active interceptors and the serializer table; pluggy is
called once per registration change, never per traced call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from bryo_plugins import get_plugin_manager

from ._errors import MoxError


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


_cache: dict[str, tuple[int, int, object]] = {}


def _cached(key: str, build: Callable[[], object]) -> Any:
    pm = get_plugin_manager()
    hit = _cache.get(key)
    if hit is not None and hit[0] == id(pm) and hit[1] == pm.epoch:
        return hit[2]
    value = build()
    _cache[key] = (id(pm), pm.epoch, value)
    return value


def interceptors() -> list[Interceptor]:
    """The interceptors of every registered backend."""

    def build() -> list[Interceptor]:
        results = get_plugin_manager().hook.bryo_mox_interceptor()
        return [r for r in results if r is not None]

    return _cached("interceptors", build)


def serializers() -> dict[str, Serializer]:
    """Registered serializers by format name."""

    def build() -> dict[str, Serializer]:
        table: dict[str, Serializer] = {}
        for group in get_plugin_manager().hook.bryo_mox_serializers():
            for serializer in group or ():
                table.setdefault(serializer.format, serializer)
        return table

    return _cached("serializers", build)


def serializer_for(format: str | None = None, path: str | None = None) -> Serializer:
    """The serializer named `format`, or the one claiming `path`'s extension."""
    table = serializers()
    if format is not None:
        if format not in table:
            raise MoxError(
                f"`format` {format!r} has no serializer; installed: "
                f"{', '.join(sorted(table)) or 'none'}. Install bryo-serializer-{format} "
                "or pass one of these."
            )
        return table[format]
    assert path is not None
    name = str(path).lower()
    matches = [(len(ext), s) for s in table.values() for ext in s.extensions if name.endswith(ext)]
    if not matches:
        known: Sequence[str] = sorted(ext for s in table.values() for ext in s.extensions)
        raise MoxError(
            f"`path` {path!s} has no known MoX extension ({', '.join(known) or 'none'}); "
            "pass `format=` explicitly."
        )
    return max(matches, key=lambda m: m[0])[1]
