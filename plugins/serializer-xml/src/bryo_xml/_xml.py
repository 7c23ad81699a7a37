"""MoX documents as XML, written and read with lxml; reading is safe on untrusted files.

The schema is the one `bryo_mox.query` searches (see `docs/mox.md`): a root `<mox>`,
`<module_call>` and one element per primitive, `<input type=...>`/`<output>`/`<outputs>`
children, `<const type=... data=base64>`, `<region param=...>` for sub-jaxprs. Reading
refuses DTDs and entities outright, never touches the network, keeps libxml2's size and
depth limits (`huge_tree=False`) and bounds the nesting depth again itself.
"""

from __future__ import annotations

import base64
import sys

import numpy as np
from lxml import etree

from bryo_mox import MoxSerializationError
from bryo_mox.document import (
    MAX_DEPTH,
    Const,
    DocNode,
    Port,
    build_element,
    decode_attr,
    parse_type,
    storage_layout,
)

#: Files larger than this are refused before parsing.
MAX_BYTES = 256 * 1024 * 1024
_PORTS = {"input": "inputs", "output": "outputs", "outputs": "results"}


def _const_data(element: etree._Element, const: Const) -> None:
    data = np.ascontiguousarray(const.data)
    if data.dtype.byteorder == ">" or (data.dtype.byteorder == "=" and sys.byteorder == "big"):
        data = data.byteswap().view(data.dtype.newbyteorder("<"))
    element.set("data", base64.b64encode(data.tobytes()).decode("ascii"))


def dumps(doc: DocNode) -> str:
    """The XML text of a document."""
    root = build_element(doc, const_data=_const_data)
    return etree.tostring(root, pretty_print=True, encoding="unicode")


def _parser() -> etree.XMLParser:
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        huge_tree=False,
        load_dtd=False,
        dtd_validation=False,
        remove_comments=True,
        remove_pis=True,
        strip_cdata=False,
    )


def loads(data: str | bytes) -> DocNode:
    """Parse XML text into a document; raises `MoxSerializationError` with the position."""
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if len(raw) > MAX_BYTES:
        raise MoxSerializationError(f"the XML is {len(raw)} bytes, over the {MAX_BYTES} limit.")
    for marker in (b"<!DOCTYPE", b"<!ENTITY", b"<!doctype", b"<!entity"):
        index = raw.find(marker)
        if index >= 0:
            line = raw.count(b"\n", 0, index) + 1
            column = index - (raw.rfind(b"\n", 0, index) + 1) + 1
            raise MoxSerializationError(
                "MoX XML may not contain a DTD or entity declarations (refused for safety)",
                line=line,
                position=column,
            )
    try:
        root = etree.fromstring(raw, _parser())
    except etree.XMLSyntaxError as error:
        line, column = error.position if error.position else (None, None)
        raise MoxSerializationError(
            f"malformed XML: {error.msg}", line=line, position=column
        ) from None
    return _element_to_doc(root, 1)


def _fail(element: etree._Element, message: str) -> MoxSerializationError:
    return MoxSerializationError(f"<{element.tag}>: {message}", line=element.sourceline)


def _element_to_doc(element: etree._Element, depth: int) -> DocNode:
    if depth > MAX_DEPTH:
        raise _fail(element, f"nested deeper than {MAX_DEPTH} levels; refusing to read it")
    attrs = {k: decode_attr(v) for k, v in element.attrib.items()}
    tag = element.tag
    if tag == "eqn":
        tag = str(attrs.pop("primitive", "eqn"))
    doc = DocNode(tag, attrs)
    for child in element:
        if not isinstance(child.tag, str):
            continue
        if child.tag == "const":
            doc.consts.append(_const(child))
        elif child.tag in _PORTS:
            getattr(doc, _PORTS[child.tag]).append(_port(child))
        else:
            doc.children.append(_element_to_doc(child, depth + 1))
    return doc


def _port(element: etree._Element) -> Port:
    type_ = element.get("type")
    if type_ is None:
        raise _fail(element, "lacks its `type` attribute")
    name = (element.text or "").strip() or None
    value = element.get("value")
    if name is None and value is None:
        raise _fail(element, "has neither a variable name nor a literal `value`")
    return Port(name, type_, decode_attr(value) if value is not None else None, element.get("bind"))


def _const(element: etree._Element) -> Const:
    type_, data = element.get("type"), element.get("data")
    name = (element.text or "").strip()
    if type_ is None or data is None or not name:
        raise _fail(element, "needs a name, a `type` and base64 `data`")
    try:
        dtype, shape = storage_layout(parse_type(type_))
        array = np.frombuffer(base64.b64decode(data, validate=True), dtype=dtype.newbyteorder("<"))
        array = array.astype(dtype).reshape(shape)
    except (ValueError, TypeError) as error:
        raise _fail(element, f"data does not fit type {type_}: {error}") from None
    return Const(name, type_, array)
