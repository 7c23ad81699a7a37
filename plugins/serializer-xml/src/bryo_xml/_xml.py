"""MoX documents as XML, written and read with lxml; reading is safe on untrusted files.

The schema is the one `bryo_mox.query` searches (see `docs/mox.md`): a root `<mox>`,
`<module_call>` and one element per primitive, `<input type=...>`/`<output>`/`<outputs>`
children, `<const type=... data=base64>`, `<region param=...>` for sub-jaxprs. Files are
written as text directly (element names and port attributes from `bryo_mox.document`,
as the query view names them), one element per line, indented two spaces per level of
nesting down to `MAX_INDENT` levels; deeper elements share that indentation, so that a
file's size stays linear in its depth (a 1,000-deep model would otherwise spend 1 MB of
spaces per 1,000 lines).

Reading checks, before lxml parses anything: the size, that the text is UTF-8 (a UTF-16
file or an `encoding="..."` declaration of another charset is refused, so the checks
below see the real text), that it has no DTD or entity declaration (`<!` only opens
comments and CDATA), and an upper bound of its element count. lxml then parses without
network, entities or DTDs and with libxml2's own limits (`huge_tree=False`, unless
`Limits.max_depth` allows deeper files than the default: libxml2 nests 256 elements
deep, 2048 with `huge_tree`), and the
elements are read into a document iteratively, each node, port and constant with its
line and position, under the load's budgets (`bryo_mox.document.Limits`).
"""

from __future__ import annotations

import bisect
import functools
import re
from typing import Any, TypedDict

import numpy as np
from lxml import etree

from bryo_mox import MoxError, MoxSerializationError
from bryo_mox.document import (
    MAX_DEPTH,
    PORT_LIST,
    AttrReader,
    Budget,
    DocNode,
    Limits,
    Port,
    PortAt,
    Source,
    attr_texts,
    const_text,
    current_budget,
    element_tag,
    located,
    new_source,
    port_attrs,
    read_const,
    shared_texts,
)

#: Files larger than this are refused before parsing (see `Limits.max_bytes`).
MAX_BYTES = Limits().max_bytes
#: Nesting levels that get their own indentation (two spaces each) in written files.
MAX_INDENT = 24
_DECLARATION = re.compile(rb"<!")
_LT = ord("<")
#: The bytes after `<` that do not open an element: `/`, `!`, `?`.
_NOT_AN_ELEMENT = np.zeros(256, np.bool_)
_NOT_AN_ELEMENT[list(b"/!?")] = True
_ENCODING = re.compile(rb"""^\s*<\?xml[^>]*?encoding\s*=\s*["']([^"']*)["']""")
_WIDE_BOMS = (b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")
#: The element of each kind of port (`PortAt.kind`).
_PORT_TAGS = {"inputs": "input", "outputs": "output", "results": "outputs"}
#: What `_Reader.literal` returns for a port that is not a plain literal.
_NOT_PLAIN: Any = object()


_ESCAPES = {
    "&": "&amp;",
    "<": "&lt;",
    ">": "&gt;",
    '"': "&quot;",
    "\n": "&#10;",
    "\r": "&#13;",
    "\t": "&#9;",
}
_TO_ESCAPE = re.compile(r'[&<>"\n\r\t]')
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


@functools.lru_cache(maxsize=1 << 16)
def _escape(text: str) -> str:
    """`text` as an XML attribute value (or element text): XML 1.0 characters only.

    Cached: a file repeats its variable names, types and attribute texts."""
    bad = _NOT_XML.search(text)
    if bad is not None:
        raise MoxSerializationError(
            f"the text {text[:60]!r} holds {bad.group()!r}, which XML 1.0 cannot hold; write "
            "this MoX as YSON or rename the value."
        )
    if _TO_ESCAPE.search(text) is None:
        return text
    return _TO_ESCAPE.sub(lambda m: _ESCAPES[m.group()], text)


def _start(tag: str, attrs: dict[str, Any]) -> str:
    if not attrs:
        return f"<{tag}"
    return f"<{tag} " + " ".join(f'{k}="{_escape(v)}"' for k, v in attrs.items())


def _port(kind: str, port: Port, pad: str) -> str:
    if port.name is not None and port.bind is None:  # most ports: one type, one name
        return f'{pad}<{kind} type="{_escape(port.type)}">{_escape(port.name)}</{kind}>\n'
    start = _start(kind, port_attrs(port))
    if port.name is None:
        return f"{pad}{start}/>\n"
    return f"{pad}{start}>{_escape(port.name)}</{kind}>\n"


def dumps(doc: DocNode) -> str:
    """The XML text of a document (one element per line, indented down to `MAX_INDENT`
    levels), written directly: the same schema `build_element` gives queries."""
    out: list[str] = []
    # start tags by (tag, shared texts): equations with equal params share one (the
    # documents are alive meanwhile, so the ids stay theirs)
    starts: dict[tuple[str, int], str] = {}
    stack: list[tuple[DocNode, int, str | None]] = [(doc, 0, None)]
    while stack:
        node, depth, closing = stack.pop()
        pad = "  " * min(depth, MAX_INDENT)
        if closing is not None:
            inner = pad + "  "
            out.extend([_port("outputs", p, inner) for p in node.results])
            out.append(f"{pad}</{closing}>\n")
            continue
        tag, extra = element_tag(node)
        texts = shared_texts(node)
        key = (tag, id(texts)) if texts is not None and not extra else None
        start = starts.get(key) if key is not None else None
        if start is None:
            attrs = attr_texts(node)
            start = _start(tag, {**attrs, **extra} if extra else attrs)
            if key is not None:
                starts[key] = start
        if not (node.consts or node.inputs or node.outputs or node.children or node.results):
            out.append(f"{pad}{start}/>\n")
            continue
        out.append(f"{pad}{start}>\n")
        inner = pad + "  "
        for const in node.consts:
            data = const_text(const)
            out.append(
                f'{inner}<const type="{_escape(const.type)}" data="{data}">'
                f"{_escape(const.name)}</const>\n"
            )
        out.extend([_port("input", p, inner) for p in node.inputs])
        out.extend([_port("output", p, inner) for p in node.outputs])
        stack.append((node, depth, tag))
        stack.extend((child, depth + 1, None) for child in reversed(node.children))
    return "".join(out)


def _parser(huge: bool = False) -> etree.XMLParser:
    """The parser; `huge` lifts libxml2's fixed limits (nesting to 2048 levels, text
    lengths), for a budget allowing deeper files: the size is bounded beforehand."""
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        huge_tree=huge,
        load_dtd=False,
        dtd_validation=False,
        remove_comments=True,
        remove_pis=True,
        strip_cdata=False,
        # whitespace between elements (the indentation) is not kept: fewer nodes to make
        # and free; a port's or constant's whitespace-only text reads as "" either way
        remove_blank_text=True,
    )


def loads(data: str | bytes) -> DocNode:
    """Parse XML text into a document; raises `MoxSerializationError` with the position."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    budget = current_budget(len(raw))
    budget.check_size()
    text = _Text(raw)
    text.check_utf8()
    text.refuse_declarations()
    budget.check_nodes(_element_bound(raw))
    try:
        # libxml2 nests 256 elements deep, enough for the default `MAX_DEPTH` of nodes
        root = etree.fromstring(raw, _parser(budget.limits.max_depth > MAX_DEPTH))
    except etree.XMLSyntaxError as error:
        line, column = error.position if error.position else (None, None)
        raise MoxSerializationError(
            f"malformed XML: {error.msg}", line=line, position=column
        ) from None
    return _Reader(text, budget).read(root)


def _element_bound(raw: bytes) -> int:
    """At least the number of elements: `<` that open neither an end tag, a comment, a
    CDATA section nor a processing instruction (`<` cannot appear in attribute values).
    Counted with numpy: one pass finds the `<`, the bytes after them are looked up."""
    codes = np.frombuffer(raw, np.uint8)
    opens = np.flatnonzero(codes == _LT)
    following = codes[opens[opens < codes.size - 1] + 1]
    return int(opens.size - np.count_nonzero(_NOT_AN_ELEMENT[following]))


class _Where(TypedDict):
    """Keyword arguments of an error raised at a byte offset (1-based)."""

    line: int
    position: int


class _Text:
    """The raw file, with line lookups for error positions."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self._line_starts: list[int] | None = None

    def line_starts(self) -> list[int]:
        if self._line_starts is None:
            self._line_starts = [0, *(m.end() for m in re.finditer(rb"\n", self.raw))]
        return self._line_starts

    def where(self, offset: int) -> _Where:
        """`line` and `position` (1-based) of a byte offset."""
        starts = self.line_starts()
        line = bisect.bisect_right(starts, offset)
        return {"line": line, "position": offset - starts[line - 1] + 1}

    def source(self, element: etree._Element) -> Source:
        """Where an element is: its line; the column of its tag is found on errors."""
        return new_source((element.sourceline, None, None, element, self.column))

    def port(self, source: Source) -> Source:
        """`source` of a port (its `hint` a `PortAt`: the port's node and index) with the
        line and column of the port's element."""
        at = source.hint
        node_source = at.node.source if isinstance(at, PortAt) else None
        element = node_source.hint if node_source is not None else None
        if not isinstance(element, etree._Element):
            return source._replace(hint=None, resolve=None)
        tag = _PORT_TAGS[at.kind]
        for index, child in enumerate(element.iterchildren(tag)):
            if index == at.index:
                return self.column(Source(child.sourceline, None, None, child))
        return source._replace(hint=None, resolve=None)  # pragma: no cover  # read from them

    def column(self, source: Source) -> Source:
        """`source` with the column of its element's tag: the n-th `<tag` on its line for
        the n-th element of that tag on that line."""
        starts, line, element = self.line_starts(), source.line, source.hint
        if line is None or not 0 < line <= len(starts):
            return source
        tag = str(element.tag)
        before = 0
        for other in element.getroottree().getroot().iter(tag):
            if other is element:
                break
            before += other.sourceline == line
        end = starts[line] if line < len(starts) else len(self.raw)
        needle, found = b"<" + tag.encode(), starts[line - 1] - 1
        for _ in range(before + 1):
            found = self.raw.find(needle, found + 1, end)
            if found < 0:
                return source
        return source._replace(position=found - starts[line - 1] + 1)

    def check_utf8(self) -> None:
        """Refuse text that is not UTF-8: lxml would decode it, after our byte checks."""
        raw = self.raw
        if raw.startswith(_WIDE_BOMS) or b"\x00" in raw[:4096]:
            raise MoxSerializationError(
                "MoX XML must be UTF-8; this file is UTF-16 or UTF-32 (or holds NUL bytes). "
                "Convert it to UTF-8.",
                line=1,
                position=1,
            )
        try:
            if not raw.isascii():  # ASCII is UTF-8
                raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise MoxSerializationError(
                f"MoX XML must be UTF-8: byte {raw[error.start]:#04x} is not ({error.reason})",
                **self.where(error.start),
            ) from None
        declared = _ENCODING.match(raw)
        if declared is not None and declared.group(1).lower() not in (b"utf-8", b"utf8"):
            raise MoxSerializationError(
                f"MoX XML must be UTF-8; the file declares encoding "
                f"{declared.group(1).decode('ascii', 'replace')!r}.",
                **self.where(declared.start(1)),
            )

    def refuse_declarations(self) -> None:
        """Refuse DTDs and entity declarations (billion laughs, external entities)."""
        raw = self.raw
        for match in _DECLARATION.finditer(raw):
            end = match.end()
            if raw.startswith(b"--", end) or raw.startswith(b"[CDATA[", end):
                continue
            raise MoxSerializationError(
                "MoX XML may not contain a DTD or entity declarations (refused for safety)",
                **self.where(match.start()),
            )


class _Reader:
    """Reads lxml elements into a document, iteratively, within the budget."""

    def __init__(self, text: _Text, budget: Budget) -> None:
        self.text = text
        self.budget = budget
        self.attr = AttrReader()
        self.column = text.column

    def read(self, root: etree._Element) -> DocNode:
        top = self.node(root)
        max_depth = self.budget.limits.max_depth
        # the common ports (a type, a name) share one source, found from their node on
        # an error (`_Text.port`): a port keeps neither its element nor its line
        shared = new_source((None, None, None, PORT_LIST, self.text.port))
        # one string per distinct type text: ports repeat a few dozen
        types: dict[Any, Any] = {}  # (lxml's texts are typed str | bytes: str here)
        stack = [(root, top, 1)]
        while stack:
            element, doc, depth = stack.pop()
            inputs, outputs, results = doc.inputs, doc.outputs, doc.results
            for child in element:
                tag = child.tag
                if tag == "input":
                    into = inputs
                elif tag == "output":
                    into = outputs
                elif tag == "outputs":
                    into = results
                elif not isinstance(tag, str):
                    continue
                elif tag == "const":
                    doc.consts.append(self.const(child))
                    continue
                else:
                    node = self.node(child)
                    if depth >= max_depth:  # the child is one level too deep
                        self.budget.check_depth(depth + 1, line=child.sourceline)
                    doc.children.append(node)
                    stack.append((child, node, depth + 1))
                    continue
                items = child.items()
                if len(items) == 1 and items[0][0] == "type":  # most ports: a type, a name
                    name = child.text
                    if name and not name.isspace():
                        type_ = types.setdefault(items[0][1], items[0][1])
                        into.append(Port(name.strip(), type_, None, None, shared))  # type: ignore[arg-type]  # str: the text is parsed as UTF-8
                        continue
                elif len(items) == 2 and items[1][0] == "value" and items[0][0] == "type":
                    literal = self.literal(child, items[1][1])  # type: ignore[arg-type]
                    if literal is not _NOT_PLAIN:  # a literal: a type, a value, no name
                        type_ = types.setdefault(items[0][1], items[0][1])
                        into.append(Port(None, type_, literal, None, shared))
                        continue
                into.append(self.port(child))
        return top

    def node(self, element: etree._Element) -> DocNode:
        source = new_source((element.sourceline, None, None, element, self.column))
        items = tuple(element.items())
        try:
            attrs = self.attr.attrs(items)  # type: ignore[arg-type]  # str: parsed as UTF-8
        except MoxError as error:
            raise located(error, source) from None
        tag = element.tag
        if tag == "eqn":
            tag = attrs.pop("primitive", "eqn")
            if not isinstance(tag, str):
                raise source.error("<eqn> needs a string `primitive` attribute")
        # the lists given, not made by the dataclass's factories (a node per element)
        return DocNode(tag, attrs, [], [], [], [], [], source=source, attrs_key=items)

    def literal(self, element: etree._Element, text: str) -> Any:
        """The value of a literal port (`value` text, no name), or `_NOT_PLAIN` for a
        port `port` must read (one with a name, or a value it refuses, located)."""
        name = element.text
        if name and not name.isspace():
            return _NOT_PLAIN
        try:
            return self.attr(text)
        except MoxError:
            return _NOT_PLAIN

    def port(self, element: etree._Element) -> Port:
        """A port (`read` reads the common ones, a type and a name, itself)."""
        source = self.text.source(element)
        type_ = element.get("type")
        if type_ is None:
            raise source.error(f"<{element.tag}> lacks its `type` attribute")
        name = (element.text or "").strip() or None
        value = element.get("value")
        if name is None and value is None:
            raise source.error(f"<{element.tag}> has neither a variable name nor a literal `value`")
        try:
            decoded = self.attr(value) if value is not None else None
        except MoxError as error:
            raise located(error, source) from None
        return Port(name, type_, decoded, element.get("bind"), source)

    def const(self, element: etree._Element) -> Any:
        source = self.text.source(element)
        type_, data = element.get("type"), element.get("data")
        name = (element.text or "").strip()
        if type_ is None or data is None or not name:
            raise source.error("<const> needs a name, a `type` and base64 `data`")
        return read_const(name, type_, data, source)
