"""MoX documents as YSON (`yt.yson` from ytsaurus-client), with typed attributes.

Each node is a YSON list of its children (an entity `#` when it has none) whose
attributes hold `primitive` (the tag), the node's attrs with their YSON types (ints,
doubles, booleans, strings, lists; other values as strings tagged `<py=%true>` in the
params text form), and `inputs`/`outputs`/`results`/`consts` as lists of maps
`{name=...; type="f32[2,3]"}` (literals carry `value`, module inputs may carry `bind`).
Reading accepts text YSON only, bounds size and nesting before parsing, and reports the
byte position of a syntax error.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import yt.yson as yson

from bryo_mox import MoxError, MoxSerializationError
from bryo_mox.document import (
    MAX_DEPTH,
    Const,
    DocNode,
    Port,
    decode,
    encode,
    parse_type,
    storage_layout,
)

MAX_BYTES = 256 * 1024 * 1024
#: YSON nesting allowed: a MoX node takes up to 4 YSON levels (list, attributes, port list,
#: port map) plus the nesting of attribute values.
MAX_NESTING = 4 * MAX_DEPTH + 16
_RESERVED = frozenset({"primitive", "inputs", "outputs", "results", "consts"})


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return type(value) is tuple and all(_plain(v) for v in value)


def _to_yson(value: Any) -> Any:
    if value is None:
        return yson.YsonEntity()
    if isinstance(value, float) and not np.isfinite(value):
        return _tagged(value)
    if isinstance(value, (bool, int, float, str)):
        return value
    if _plain(value):
        return [_to_yson(v) for v in value]
    return _tagged(value)


def _tagged(value: Any) -> Any:
    text = yson.YsonUnicode(encode(value))
    text.attributes = {"py": True}
    return text


def _from_yson(value: Any) -> Any:
    attributes = getattr(value, "attributes", None) or {}
    if isinstance(value, yson.YsonEntity):
        return None
    if attributes.get("py"):
        try:
            return decode(str(value))
        except MoxError as error:
            raise MoxSerializationError(str(error)) from None
    if isinstance(value, list):
        return tuple(_from_yson(v) for v in value)
    if isinstance(value, bool) or isinstance(value, yson.YsonBoolean):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, (str, bytes)):
        return value.decode("utf-8") if isinstance(value, bytes) else str(value)
    raise MoxSerializationError(f"unexpected YSON value {value!r:.60}")


def _port_to_yson(port: Port) -> dict[str, Any]:
    out: dict[str, Any] = {"type": port.type}
    if port.name is not None:
        out["name"] = port.name
    else:
        out["value"] = _to_yson(port.value)
    if port.bind is not None:
        out["bind"] = port.bind
    return out


def _node_to_yson(doc: DocNode) -> Any:
    clash = _RESERVED & set(doc.attrs)
    if clash:
        raise MoxSerializationError(f"<{doc.tag}> has attrs {sorted(clash)} reserved by YSON.")
    attributes: dict[str, Any] = {"primitive": doc.tag}
    attributes.update((k, _to_yson(v)) for k, v in doc.attrs.items())
    for key, ports in (("inputs", doc.inputs), ("outputs", doc.outputs), ("results", doc.results)):
        if ports or key != "outputs":
            attributes[key] = [_port_to_yson(p) for p in ports]
    if doc.consts:
        attributes["consts"] = [
            {"name": c.name, "type": c.type, "data": _const_bytes(c.data)} for c in doc.consts
        ]
    node: Any = [_node_to_yson(c) for c in doc.children] if doc.children else yson.YsonEntity()
    if isinstance(node, list):
        node = yson.YsonList(node)
    node.attributes = attributes
    return node


def _const_bytes(data: np.ndarray) -> str:
    import base64

    little = np.ascontiguousarray(data).astype(np.dtype(data.dtype).newbyteorder("<"))
    return base64.b64encode(little.tobytes()).decode("ascii")


def dumps(doc: DocNode) -> str:
    """The YSON text (pretty format) of a document."""
    return yson.dumps(_node_to_yson(doc), yson_format="pretty").decode("utf-8")


def _scan(raw: bytes) -> None:
    """Refuse binary YSON and nesting deeper than `MAX_NESTING`, with the byte position."""
    depth, in_string, escaped = 0, False, False
    line, line_start = 1, 0
    for index, byte in enumerate(raw):
        if byte == 0x0A:
            line, line_start = line + 1, index + 1
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:
                escaped = True
            elif byte == 0x22:
                in_string = False
            continue
        if byte < 0x09 or byte in (0x0B, 0x0C) or 0x0E <= byte < 0x20:
            raise MoxSerializationError(
                "binary YSON is not accepted; write text YSON",
                line=line,
                position=index - line_start + 1,
            )
        if byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B, 0x3C):  # [ { <
            depth += 1
            if depth > MAX_NESTING:
                raise MoxSerializationError(
                    f"YSON nested deeper than {MAX_NESTING} levels; refusing to read it",
                    line=line,
                    position=index - line_start + 1,
                )
        elif byte in (0x5D, 0x7D, 0x3E):
            depth -= 1


def loads(data: str | bytes) -> DocNode:
    """Parse YSON text into a document; raises `MoxSerializationError` with the position."""
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if len(raw) > MAX_BYTES:
        raise MoxSerializationError(f"the YSON is {len(raw)} bytes, over the {MAX_BYTES} limit.")
    _scan(raw)
    stream = io.BytesIO(raw)
    try:
        tree = yson.load(stream)
    except (yson.YsonError, RecursionError, ValueError, TypeError) as error:
        offset = stream.tell()
        line = raw.count(b"\n", 0, offset) + 1
        column = offset - (raw.rfind(b"\n", 0, offset) + 1) + 1
        message = getattr(error, "message", None) or str(error)
        raise MoxSerializationError(
            f"malformed YSON: {message}", line=line, position=column
        ) from None
    return _yson_to_node(tree, 1)


def _yson_to_node(value: Any, depth: int) -> DocNode:
    if depth > MAX_DEPTH:
        raise MoxSerializationError(f"the document nests deeper than {MAX_DEPTH} levels.")
    attributes = dict(getattr(value, "attributes", None) or {})
    tag = attributes.pop("primitive", None)
    if not isinstance(tag, str):
        raise MoxSerializationError("a YSON node lacks its string attribute `primitive`.")
    doc = DocNode(str(tag))
    for key in ("inputs", "outputs", "results"):
        ports = attributes.pop(key, [])
        setattr(doc, key, [_yson_to_port(p, tag) for p in ports])
    doc.consts = [_yson_to_const(c, tag) for c in attributes.pop("consts", [])]
    doc.attrs = {str(k): _from_yson(v) for k, v in attributes.items()}
    if isinstance(value, list):
        doc.children = [_yson_to_node(child, depth + 1) for child in value]
    elif not isinstance(value, yson.YsonEntity):
        raise MoxSerializationError(f"node `{tag}` must be a list of children or `#`.")
    return doc


def _yson_to_port(port: Any, tag: str) -> Port:
    if not isinstance(port, dict) or "type" not in port:
        raise MoxSerializationError(f"a port of `{tag}` must be a map with a `type`.")
    name = port.get("name")
    value = _from_yson(port["value"]) if "value" in port else None
    if name is None and "value" not in port:
        raise MoxSerializationError(f"a port of `{tag}` has neither `name` nor `value`.")
    bind = port.get("bind")
    return Port(
        None if name is None else str(name),
        str(port["type"]),
        value,
        None if bind is None else str(bind),
    )


def _yson_to_const(const: Any, tag: str) -> Const:
    import base64

    try:
        dtype, shape = storage_layout(parse_type(str(const["type"])))
        raw = base64.b64decode(str(const["data"]), validate=True)
        array = np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(shape)
        return Const(str(const["name"]), str(const["type"]), array)
    except (KeyError, TypeError, ValueError) as error:
        raise MoxSerializationError(f"a constant of `{tag}` is malformed: {error}") from None
