"""A reader of text YSON for the layout `dumps` writes: one node per line.

`dumps` writes each node on its own line, its attributes in one order: `primitive`, the
params, `inputs`, `outputs` (when there are any), `results`, `consts` (when there are
any), ports as `{"type"=...;"name"=...}` (literals: `"value"=` a scalar). `read_lines`
matches each line with one regular expression (`_LINE`, in C), reads the ports of a
list with another (`_PORT`), and builds the document from those strings directly. The
params of a node are read by the exact `Reader` (as the map `{...}` their text is),
once per distinct text: the nodes of a model repeat a few hundred sets of params.

It returns `None` for anything else (other layouts, escapes, other attributes, a
`bind`, a value the exact reader refuses, an array over the budget, more values or
deeper nesting than the limits allow): the caller then reads the text another way,
which gives the same document or the located error. The limits are checked before
anything is allocated: the values are bounded by counting tokens, the depth as lines
open nodes. The regular expressions cannot backtrack far: the alternatives of each
repetition start with different characters, and the params exclude the reserved keys.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from bryo_mox import MoxError
from bryo_mox.document import (
    PORT_LIST,
    AttrReader,
    Budget,
    DocNode,
    Port,
    PortAt,
    Source,
    new_source,
    read_const,
)

from ._text import Reader, attr_value

_STRING = r'"[^"\\\n]*"'
_SCALAR = r'[^\s;=\[\]{}<>"\\]+'
#: An attribute value `dumps` writes: a scalar, a string, a `py`-tagged string or a list
#: of those, nested at most `_LIST_DEPTH` deep (deeper ones: the text is declined).
_LIST_DEPTH = 5


def _value_pattern() -> str:
    item = rf'(?:{_STRING}|{_SCALAR}|<"py"=%true>{_STRING})'
    for _ in range(_LIST_DEPTH):
        item = rf"(?:{item}|\[(?:{item}(?:;{item})*)?\])"
    return item


_RESERVED = "primitive|inputs|outputs|results|consts"
_VALUE = _value_pattern()


def _param(name: str, value: str) -> str:
    """A param after `;`, not a reserved name (`name` and `value`: their patterns)."""
    return rf';"(?!(?:{_RESERVED})"){name}"={value}'


_NAME = r'[^"\\\n]*'
_PARAMS = f"(?:{_param(_NAME, _VALUE)})*+"
#: A param in the params `_LINE` matched: its name and its value's text.
_PARAM_ITEM = re.compile(_param(f"({_NAME})", f"({_VALUE})"))
_PORT_TEXT = rf'\{{"type"={_STRING};(?:"name"={_STRING}|"value"={_SCALAR})\}}'
_PORTS = rf"(?:{_PORT_TEXT}(?:;{_PORT_TEXT})*)?"
_CONST_TEXT = rf'\{{"name"={_STRING};"type"={_STRING};"data"={_STRING}\}}'
#: One line: a node (its children, if any, on the next lines) or the end of a list.
_LINE = re.compile(
    rf' *(?:(?P<close>\])|<"primitive"="(?P<tag>[^"\\\n]*)"(?P<params>{_PARAMS})'
    rf';"inputs"=\[(?P<inputs>{_PORTS})\](?:;"outputs"=\[(?P<outputs>{_PORTS})\])?'
    rf';"results"=\[(?P<results>{_PORTS})\]'
    rf'(?:;"consts"=\[(?P<consts>{_CONST_TEXT}(?:;{_CONST_TEXT})*)\])?>(?P<body>[\[#]))'
    r"(?P<end>;?)\n"
)
#: A port in a list `_LINE` matched: its type, and its name or its literal value.
_PORT = re.compile(r'\{"type"="([^"]*)";(?:"name"="([^"]*)"|"value"=([^;}]*))\}')
_CONST = re.compile(r'\{"name"="([^"]*)";"type"="([^"]*)";"data"="([^"]*)"\}')
_MISSING = object()


class _Declined(Exception):
    """The text is not in the layout this reads, or the exact reader must say why."""


def read_lines(
    text: str, budget: Budget, max_nesting: int, locate: Callable[[Source], Source]
) -> DocNode | None:
    """The document of `text` (a file `dumps` wrote), or `None` (see the module
    docstring). `locate` finds a source's line from its path when an error is raised."""
    if "\\" in text or not _within_limits(text, budget):
        return None
    spent = budget.array_bytes_left
    try:
        return _LineReader(budget, max_nesting, locate).read(text)
    except (_Declined, MoxError):
        budget.array_bytes_left = spent  # the next reader counts the arrays again
        return None


def _within_limits(text: str, budget: Budget) -> bool:
    """At most `max_nodes` values: every value is a string, an opener, `#`, or a token
    before `;` or a closer (an upper bound, as the other readers count)."""
    # counted by numpy over the UTF-8 bytes, one compare per byte: these characters are
    # ASCII, and no other character's UTF-8 holds an ASCII byte
    codes = np.frombuffer(text.encode("utf-8", "surrogatepass"), np.uint8)
    count = lambda char: int(np.count_nonzero(codes == ord(char)))
    tokens = count('"') // 2 + sum(map(count, "[{<]}>#;")) + 1
    return tokens <= budget.limits.max_nodes


class _LineReader:
    def __init__(
        self, budget: Budget, max_nesting: int, locate: Callable[[Source], Source]
    ) -> None:
        self.budget = budget
        self.max_nesting = max_nesting
        self.locate = locate
        self.attrs = AttrReader()
        #: the source of every port of the file: `port_at` finds where one is, on errors
        self.port_list = new_source((None, None, None, PORT_LIST, self.port_at))
        #: `"value"=` texts of literal ports, read (scalars: immutable)
        self.literals: dict[str, Any] = {}
        #: param value texts, read (immutable values only)
        self.values: dict[str, Any] = {}

    def read(self, text: str) -> DocNode:
        match, max_depth = _LINE.match, self.budget.limits.max_depth
        root: DocNode | None = None
        stack: list[tuple[DocNode, str]] = []  # the open nodes, with their paths
        position, size = 0, len(text)
        while position < size:
            line = match(text, position)
            if line is None or (root is not None and not stack):  # text after the root
                raise _Declined
            position = line.end()
            if line.group("close"):
                if not stack:
                    raise _Declined
                stack.pop()
                if bool(line.group("end")) != bool(stack):  # `;` after every child
                    raise _Declined
                continue
            opens = line.group("body") == "["
            # `;` after a child, after its `#` or (with children) its closing `]`
            if bool(line.group("end")) != (bool(stack) and not opens) or len(stack) >= max_depth:
                raise _Declined
            if stack:
                parent, parent_path = stack[-1]
                path = f"{parent_path}/{len(parent.children)}"
            else:
                parent, path = None, "/"
            doc = self.node(line, path)
            if parent is None:
                root = doc
            else:
                parent.children.append(doc)
            if opens:
                stack.append((doc, "" if parent is None else path))
        if root is None or stack:
            raise _Declined
        return root

    def node(self, line: re.Match[str], path: str) -> DocNode:
        source = new_source((None, None, path, 0, self.locate))
        params = line.group("params")
        tag, params, inputs, outputs, results, consts = line.group(
            "tag", "params", "inputs", "outputs", "results", "consts"
        )
        attrs = self.attrs.decoded_attrs(params, lambda: self.params(params))
        doc = DocNode(
            tag,
            attrs,
            [],
            self.ports(inputs) if inputs else [],
            self.ports(outputs) if outputs else [],
            [],
            self.ports(results) if results else [],
            source=source,
            attrs_key=params,
        )
        if consts:
            base = path.rstrip("/")
            for index, (name, type_, data) in enumerate(_CONST.findall(consts)):
                where = source._replace(path=f"{base}/@consts/{index}")
                doc.consts.append(read_const(name, type_, data, where))
        return doc

    def ports(self, text: str) -> list[Port]:
        # every port shares one source: a port's own (its path) is made on errors
        where = self.port_list
        if '"value"=' not in text and '"name"=""' not in text:  # variables only
            return [Port(name, type_, None, None, where) for type_, name, _ in _PORT.findall(text)]
        ports = []
        for type_, name, value in _PORT.findall(text):
            if name:
                ports.append(Port(name, type_, None, None, where))
            elif value:
                ports.append(Port(None, type_, self.literal(value), None, where))
            else:  # `"name"=""`: the exact reader's builder names the error
                raise _Declined
        return ports

    def port_at(self, source: Source) -> Source:
        """`source` of a port (its `hint` a `PortAt`) with its path in the YSON tree and
        its line and column (those of its node)."""
        at = source.hint
        if not isinstance(at, PortAt) or at.node.source is None:  # pragma: no cover
            return source._replace(hint=None, resolve=None)
        base = (at.node.source.path or "/").rstrip("/")
        return self.locate(source._replace(path=f"{base}/@{at.kind}/{at.index}", hint=None))

    def literal(self, text: str) -> Any:
        hit = self.literals.get(text)
        if hit is None:
            hit = self.exact(text)
            if not isinstance(hit, (bool, int, float, str)):
                raise _Declined  # `#` (no value) and the like: the exact path reads them
            self.literals[text] = hit
        return hit

    def params(self, text: str) -> tuple[dict[str, Any], bool]:
        """The attrs of a params text (`;"name"=value...`), as `_Builder` reads them, and
        whether they are immutable (may be shared by the nodes with this text)."""
        items = _PARAM_ITEM.findall(text)
        attrs = {name: self.value(value) for name, value in items}
        if len(attrs) != len(items):
            raise _Declined  # a name twice: the exact reader names it
        return attrs, all(value in self.values for _, value in items)

    def value(self, text: str) -> Any:
        """An attr value from its text (`attr_value` of what the exact reader reads), once per
        text when it is immutable (arrays are decoded and counted each time)."""
        hit = self.values.get(text, _MISSING)
        if hit is not _MISSING:
            return hit
        if text[0] == '"' and text[-1] == '"':  # a string: no escapes in this text
            value = text[1:-1]
        else:
            value = attr_value(self.exact(text))
        if AttrReader.immutable({"": value}):
            self.values[text] = value
        return value

    def exact(self, text: str) -> Any:
        """`text` (a value) read by the exact reader, within the budget."""
        raw = text.encode("utf-8")
        return Reader(raw, Budget(self.budget.limits, len(raw)), self.max_nesting).parse()
