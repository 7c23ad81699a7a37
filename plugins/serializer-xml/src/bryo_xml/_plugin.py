"""The `xml` MoX format, registered through bryo's `bryo_mox_serializers` hook."""

from __future__ import annotations

from bryo_mox import Serializer
from bryo_plugins import hookimpl

from . import _xml


@hookimpl
def bryo_mox_serializers() -> list[Serializer]:
    return [Serializer("xml", (".mox.xml", ".xml"), _xml.dumps, _xml.loads)]
