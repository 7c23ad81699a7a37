"""MoX documents as text YSON (the YTsaurus format), with typed attributes.

Each node is a YSON list of its children (an entity `#` when it has none) whose
attributes hold `primitive` (the tag), the node's attrs with their YSON types (ints,
doubles, booleans, strings, lists; other values as strings tagged `<"py"=%true>` in the
params text form), and `inputs`/`outputs`/`results`/`consts` as lists of maps
`{"name"=...; "type"="f32[2,3]"}` (literals carry `value`, module inputs may carry
`bind`, constants `data` in base64). One node is written per line.

Reading builds the document line by line when the text is in the layout `dumps` writes
(`_lines.read_lines`: one regular expression per line); else straight from the JSON form
of the text (`_fast.fast_json`: limits checked before `json.loads` allocates anything)
when it can (`_JsonBuilder`); any other text, and any error, goes through the bounded reader of
`_text` (text YSON only; size, nesting and value count checked as it reads, so memory
stays proportional to what the limits allow) and `_Builder`, iteratively. That reader
reads a few MB a second, so a text surely over `max_nodes` values (a count of its
punctuation in numpy, `Reader.check_value_count`) is refused before it. Every error
names the line, column and the path of the value in the YSON tree (`/0/3/@inputs/1`:
the second input of the fourth child of the first child). Files written by `yt.yson`
(its pretty format) read the same.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, NamedTuple

from bryo_mox import MoxError, MoxSerializationError
from bryo_mox.document import (
    AttrReader,
    Const,
    DocNode,
    Limits,
    Port,
    Source,
    const_text,
    current_budget,
    decode,
    encode,
    located,
    new_source,
    read_const,
    shared_texts,
    value_key,
)

from ._fast import fast_json, load_json
from ._lines import read_lines
from ._text import MAX_VALUE_DEPTH, Attributed, Reader, attr_value, cached_quote, quote, scalar

#: Files larger than this are refused before parsing (see `Limits.max_bytes`).
MAX_BYTES = Limits().max_bytes
#: YSON levels one MoX node may take (list, attributes, port list, port map) plus slack
#: for attribute values; the nesting allowed is this times `Limits.max_depth`.
LEVELS_PER_NODE = 4
_RESERVED = frozenset({"primitive", "inputs", "outputs", "results", "consts"})
_PORT_KINDS = ("inputs", "outputs", "results")


# -- writing -----------------------------------------------------------------------------


def _plain(value: Any) -> bool:
    if value is None or (isinstance(value, (bool, int, float, str)) and not _enum(value)):
        return True
    return type(value) is tuple and all(_plain(v) for v in value)


def _enum(value: Any) -> bool:
    """Whether `value` is an enum member: an `IntEnum` (`RoundingMethod`) is an int, but
    reads back as one only in its text form."""
    return isinstance(value, enum.Enum)


def _value(value: Any) -> str:
    """An attr value in YSON: typed scalars and lists, else its text form tagged `py`."""
    if type(value) is int and not -(2**63) <= value < 2**64:
        return _tagged(value)
    if _enum(value):
        return _tagged(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return scalar(value)
    if _plain(value):
        return "[" + ";".join(_value(v) for v in value) + "]"
    return _tagged(value)


def _tagged(value: Any) -> str:
    return '<"py"=%true>' + quote(encode(value))


def _port(port: Port) -> str:
    if port.name is not None and port.bind is None:  # most ports
        return f'{{"type"={cached_quote(port.type)};"name"={cached_quote(port.name)}}}'
    items = [f'"type"={cached_quote(port.type)}']
    if port.name is not None:
        items.append(f'"name"={cached_quote(port.name)}')
    else:
        items.append(f'"value"={_value(port.value)}')
    if port.bind is not None:
        items.append(f'"bind"={cached_quote(port.bind)}')
    return "{" + ";".join(items) + "}"


def _const(const: Const) -> str:
    return (
        f'{{"name"={quote(const.name)};"type"={quote(const.type)};'
        f'"data"={quote(const_text(const))}}}'
    )


class _Known(NamedTuple):
    """What one `dumps` writes again and again (the documents outlive it)."""

    #: the tag and attrs part of a node by `(tag, id(shared_texts(doc)))`: equal params
    heads: dict[tuple[str, int], list[str]]
    #: one attribute, `"name"=value`, by `(name, value_key(value))`: module calls
    items: dict[tuple[str, Any], str]


def _attributes(doc: DocNode, known: _Known) -> str:
    """The attributes of a node (its head from `known` when an equal one was written)."""
    texts = shared_texts(doc)
    key = (doc.tag, id(texts)) if texts is not None else None
    head = known.heads.get(key) if key is not None else None
    if head is None:
        head = _head(doc, known.items)
        if key is not None:
            known.heads[key] = head
    items = head.copy()
    for key, ports in (("inputs", doc.inputs), ("outputs", doc.outputs), ("results", doc.results)):
        if ports or key != "outputs":
            items.append(f'"{key}"=[' + ";".join([_port(p) for p in ports]) + "]")
    if doc.consts:
        items.append('"consts"=[' + ";".join([_const(c) for c in doc.consts]) + "]")
    return "<" + ";".join(items) + ">"


def _head(doc: DocNode, known: dict[tuple[str, Any], str]) -> list[str]:
    clash = _RESERVED & set(doc.attrs)
    if clash:
        raise MoxSerializationError(f"<{doc.tag}> has attrs {sorted(clash)} reserved by YSON.")
    items = [f'"primitive"={cached_quote(doc.tag)}']
    for name, value in doc.attrs.items():
        key = (name, value_key(value))
        item = known.get(key) if key[1] is not None else None
        if item is None:
            item = f"{cached_quote(name)}={_value(value)}"
            if key[1] is not None:
                known[key] = item
        items.append(item)
    return items


def dumps(doc: DocNode) -> str:
    """The YSON text of a document: one node per line, children indented."""
    out: list[str] = []
    known = _Known({}, {})
    stack: list[tuple[DocNode, int, bool]] = [(doc, 0, False)]
    while stack:
        node, depth, closing = stack.pop()
        indent = "  " * depth
        end = ";\n" if depth else "\n"
        if closing:
            out.append(f"{indent}]{end}")
        elif node.children:
            out.append(f"{indent}{_attributes(node, known)}[\n")
            stack.append((node, depth, True))
            stack.extend((child, depth + 1, False) for child in reversed(node.children))
        else:
            out.append(f"{indent}{_attributes(node, known)}#{end}")
    return "".join(out)


# -- reading -----------------------------------------------------------------------------


def loads(data: str | bytes) -> DocNode:
    """Parse YSON text into a document; errors carry the line, position and path."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    budget = current_budget(len(raw))
    budget.check_size()
    max_nesting = LEVELS_PER_NODE * budget.limits.max_depth + 16
    reader = Reader(raw, budget, max_nesting)
    if isinstance(data, str) and data.isascii():
        text: str | None = data  # ASCII text is its own UTF-8
    else:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = None
    doc = read_lines(text, budget, max_nesting, _ByPath(reader)) if text is not None else None
    if doc is not None:
        return doc
    converted = fast_json(raw, budget, max_nesting)
    value = load_json(converted) if converted is not None else None
    if value is not None:
        assert converted is not None
        spent = budget.array_bytes_left
        doc = _JsonBuilder(_ByPath(reader)).document(value, converted.keys)
        if doc is not None:
            return doc
        budget.array_bytes_left = spent  # the exact reader counts the arrays again
    reader.check_value_count()
    return _Builder(reader.locate).document(reader.parse())


class _ByPath:
    """Locates a source by its YSON path: the fast reader keeps no offsets, so the first
    error reads the text again with the exact reader, which records them."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        self.tree: Any = None

    def __call__(self, source: Source) -> Source:
        if self.tree is None:
            self.tree = self.reader.parse()
        value = self.tree
        try:
            for index in filter(None, (source.path or "/").split("/@")[0].split("/")):
                value = value.value[int(index)]
        except (AttributeError, IndexError, TypeError, ValueError):  # pragma: no cover
            return source  # not a node path: the builder makes only node paths
        offset = value.offset if isinstance(value, Attributed) else 0
        return self.reader.locate(source._replace(hint=offset))


class _Builder:
    """Builds the document from the parsed YSON tree, iteratively."""

    def __init__(self, locate: Callable[[Source], Source]) -> None:
        self.locate = locate
        self.attrs = AttrReader()

    def source(self, value: Any, path: str) -> Source:
        offset = value.offset if isinstance(value, Attributed) else 0
        return Source(None, None, path, offset, self.locate)

    def document(self, tree: Any) -> DocNode:
        root = self.node(tree, "/")
        stack = [(tree, root, "")]
        while stack:
            value, doc, path = stack.pop()
            children = value.value if isinstance(value, Attributed) else None
            for index, child in enumerate(children or ()):
                child_path = f"{path}/{index}"
                node = self.node(child, child_path)
                doc.children.append(node)
                stack.append((child, node, child_path))
        return root

    def node(self, value: Any, path: str) -> DocNode:
        source = self.source(value, path)
        if not isinstance(value, Attributed):
            raise source.error(
                "a YSON node must be a list of children (or `#`) with attributes naming its "
                "`primitive`"
            )
        if not (value.value is None or isinstance(value.value, list)):
            raise source.error("a YSON node must be a list of children or `#`")
        attributes = dict(value.attributes)
        tag = attributes.pop("primitive", None)
        if not isinstance(tag, str):
            raise source.error("a YSON node lacks its string attribute `primitive`")
        doc = DocNode(tag, source=source)
        base = path.rstrip("/")
        for kind in _PORT_KINDS:
            prefix = f"{base}/@{kind}"
            setattr(doc, kind, self.ports(attributes.pop(kind, []), prefix, tag, source))
        consts = self.items(attributes.pop("consts", []), f"{base}/@consts", source)
        doc.consts = [self.const(c, f"{base}/@consts/{i}", source) for i, c in consts]
        # The attributes' repr tells their types apart (`True`/`1`/`1.0`, `-0.0`) and
        # leaves offsets out: equal keys mean equal attrs (the loader's trace cache key).
        doc.attrs_key = key = repr(attributes)

        def decode() -> tuple[dict[str, Any], bool]:
            attrs = {}
            for name, value in attributes.items():
                try:
                    attrs[name] = attr_value(value, 0)
                except MoxError as error:
                    raise source.error(f"<{tag}> attribute `{name}`: {error}") from None
            # `py`-tagged values may be arrays, decoded and counted against the budget
            # each time (a string that says `Attributed(` only costs a cache miss)
            return attrs, "Attributed(" not in key

        doc.attrs = self.attrs.decoded_attrs(key, decode)
        return doc

    def items(self, value: Any, path: str, parent: Source) -> list[tuple[int, Any]]:
        if not isinstance(value, list):
            raise parent._replace(path=path).error("must be a list")
        return list(enumerate(value))

    def ports(self, values: Any, prefix: str, tag: str, parent: Source) -> list[Port]:
        """A node's ports of one kind (`prefix`: their list's path); the common port, a
        named one of strings, is read here, the others by `port`."""
        if not isinstance(values, list):
            raise parent._replace(path=prefix).error("must be a list")
        line, position, _, hint, resolve = parent
        ports = []
        for index, value in enumerate(values):
            if type(value) is dict:
                type_, name, bind = value.get("type"), value.get("name"), value.get("bind")
                if type(type_) is str and type(name) is str and (bind is None or type(bind) is str):
                    where = new_source((line, position, f"{prefix}/{index}", hint, resolve))
                    ports.append(Port(name, type_, None, bind, where))
                    continue
            ports.append(self.port(value, prefix, index, tag, parent))
        return ports

    def port(self, value: Any, prefix: str, index: int, tag: str, parent: Source) -> Port:
        """A literal port, or a malformed one (its error located at its path)."""
        path = f"{prefix}/{index}"
        source = new_source((parent.line, parent.position, path, parent.hint, parent.resolve))
        if not isinstance(value, dict) or not isinstance(value.get("type"), str):
            raise source.error(f"a port of `{tag}` must be a map with a string `type`")
        name, bind = value.get("name"), value.get("bind")
        if name is None and "value" not in value:
            raise source.error(f"a port of `{tag}` has neither `name` nor `value`")
        if not isinstance(name, (str, type(None))) or not isinstance(bind, (str, type(None))):
            raise source.error(f"a port of `{tag}` has a `name` or `bind` that is not a string")
        try:
            literal = attr_value(value["value"], 0) if name is None else None
        except MoxError as error:
            raise located(error, source) from None
        return Port(name, value["type"], literal, bind, source)

    def const(self, value: Any, path: str, parent: Source) -> Const:
        source = parent._replace(path=path)
        if not isinstance(value, dict) or not all(
            isinstance(value.get(k), str) for k in ("name", "type", "data")
        ):
            raise source.error("a constant must be a map of string `name`, `type` and `data`")
        return read_const(value["name"], value["type"], value["data"], source)


class _Declined(Exception):
    """The JSON form holds what `_JsonBuilder` does not read: the exact reader must."""


#: The keys of the map a `py` tag became in the JSON form (`_fast.FastJson`).
_TAG, _TAGGED = "\x00", "\x00v"


class _JsonBuilder:
    """Builds the document from the JSON form of a text (`_fast.fast_json`) directly:
    what `_Builder` makes of the tree `read_fast` returns for the same text, without
    that tree (`Attributed` values, markers paired with their nodes).

    `document` returns `None` for anything it does not read as `_Builder` would, errors
    included (a map where a node or a port belongs, a malformed value, a key twice in a
    map, an array over the budget): the caller then reads the text with the exact reader
    and `_Builder`, which raise the located error. Sources carry paths; `locate` finds
    their lines when an error is raised."""

    def __init__(self, locate: Callable[[Source], Source]) -> None:
        self.locate = locate
        self.attrs = AttrReader()
        self.keys = 0  # keys of the maps read (see `_fast.FastJson.keys`)

    def document(self, value: Any, keys: int) -> DocNode | None:
        """The document of `value` (the JSON form's top list), or `None` (see above)."""
        try:
            if type(value) is not list or len(value) != 2:
                raise _Declined
            root = self.node(value[0], value[1], "/")
            stack = [(value[1], root, "")]
            while stack:
                children, doc, path = stack.pop()
                if children is None:
                    continue
                if len(children) % 2:
                    raise _Declined
                nodes = doc.children
                for index in range(len(children) // 2):
                    child_path = f"{path}/{index}"
                    body = children[2 * index + 1]
                    nodes.append(self.node(children[2 * index], body, child_path))
                    stack.append((body, nodes[-1], child_path))
        except (_Declined, MoxError):
            return None
        return root if self.keys == keys else None

    def node(self, marker: Any, body: Any, path: str) -> DocNode:
        if type(marker) is not dict or len(marker) != 1 or not (body is None or type(body) is list):
            raise _Declined
        attributes = marker.get(_TAG)
        if type(attributes) is not dict:
            raise _Declined
        self.keys += 1 + len(attributes)
        attributes = attributes.copy()
        tag = attributes.pop("primitive", None)
        if type(tag) is not str:
            raise _Declined
        source = new_source((None, None, path, 0, self.locate))
        base = path.rstrip("/")
        doc = DocNode(tag, source=source)
        doc.inputs = self.ports(attributes.pop("inputs", []), f"{base}/@inputs", source)
        doc.outputs = self.ports(attributes.pop("outputs", []), f"{base}/@outputs", source)
        doc.results = self.ports(attributes.pop("results", []), f"{base}/@results", source)
        consts = attributes.pop("consts", None)
        if consts is not None:
            doc.consts = self.consts(consts, f"{base}/@consts", source)
        doc.attrs_key = key = repr(attributes)

        def decode() -> tuple[dict[str, Any], bool]:
            attrs = {name: self.value(value, 0) for name, value in attributes.items()}
            # `py`-tagged values may be arrays, decoded and counted each time
            return attrs, "\\x00" not in key

        doc.attrs = self.attrs.decoded_attrs(key, decode)
        self.keys += 2 * key.count("\\x00v")  # the tags' maps (their keys hold no `\\`)
        return doc

    def ports(self, values: Any, prefix: str, parent: Source) -> list[Port]:
        if type(values) is not list:
            raise _Declined
        _, _, _, hint, resolve = parent
        ports = []
        for index, value in enumerate(values):
            if type(value) is not dict:
                raise _Declined
            self.keys += len(value)
            type_, name, bind = value.get("type"), value.get("name"), value.get("bind")
            if type(type_) is not str or not (bind is None or type(bind) is str):
                raise _Declined
            literal = None
            if name is None:
                if "value" not in value:
                    raise _Declined
                literal = self.value(value["value"], 0)
                self.keys += 2 * repr(value["value"]).count("\\x00v")
            elif type(name) is not str:
                raise _Declined
            where = new_source((None, None, f"{prefix}/{index}", hint, resolve))
            ports.append(Port(name, type_, literal, bind, where))
        return ports

    def consts(self, values: Any, prefix: str, parent: Source) -> list[Const]:
        if type(values) is not list:
            raise _Declined
        consts = []
        for index, value in enumerate(values):
            if type(value) is not dict:
                raise _Declined
            self.keys += len(value)
            name, type_, data = value.get("name"), value.get("type"), value.get("data")
            if not (isinstance(name, str) and isinstance(type_, str) and isinstance(data, str)):
                raise _Declined
            source = parent._replace(path=f"{prefix}/{index}")
            consts.append(read_const(name, type_, data, source))
        return consts

    def value(self, value: Any, depth: int) -> Any:
        """An attr value: `_attr` of what `read_fast` makes of it."""
        if depth > MAX_VALUE_DEPTH:
            raise _Declined
        if type(value) is list:
            return tuple(self.value(v, depth + 1) for v in value)
        if type(value) is dict:
            if len(value) == 2 and value.get(_TAG) == "py" and type(value.get(_TAGGED)) is str:
                return decode(value[_TAGGED])
            raise _Declined
        return value
