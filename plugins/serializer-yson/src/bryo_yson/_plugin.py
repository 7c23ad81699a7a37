"""The `yson` MoX format, registered through bryo's `bryo_mox_serializers` hook."""

from __future__ import annotations

from bryo_mox import Serializer
from bryo_plugins import hookimpl

from . import _yson


@hookimpl
def bryo_mox_serializers() -> list[Serializer]:
    return [Serializer("yson", (".mox.yson", ".yson"), _yson.dumps, _yson.loads)]
