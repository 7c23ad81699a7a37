"""The query language: XPath 1.0, plus YAX's short forms.

`query` takes full XPath 1.0 (run by lxml) and, beside it, the forms YAX's own query
reader takes that XPath 1.0 spells otherwise:

- a step without a node test selects any node: `//[@type="Dense"]` is
  `//*[@type="Dense"]`, `a/[@x=1]` is `a/*[@x=1]`;
- a path ending in `//` selects the node and all its descendants: `//` alone is every
  node, the root first;
- `/` alone selects the root (XPath's document node, which stands for the MoX).

An expression is read as XPath 1.0 first; only one that XPath 1.0 rejects is rewritten,
so a valid XPath never changes meaning. `tokenize_xpath` splits an expression into XPath
1.0's tokens (its ExprToken production, section 3.7), which the rewriting works on.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from ._errors import MoxError


@dataclass(frozen=True, slots=True)
class Token:
    """One token of a query: `kind` (`"("`, `"@"`, `"NameTest"`, `"Operator"`, `"Literal"`,
    ...), its text `value` (`str(token)`) and its offset `start` in the expression."""

    kind: str
    value: str
    start: int = 0

    def __str__(self) -> str:
        return self.value


_NCNAME = r"[A-Za-z_][\w.\-]*"
_LEXEME = re.compile(
    r"""\s*(?:
      (?P<literal>"[^"]*"|'[^']*')
    | (?P<number>\d+(?:\.\d*)?|\.\d+)
    | (?P<punct>\.\.|::|//|!=|<=|>=|[()\[\].@,/|+\-=<>*])
    | (?P<variable>\$(?:NCN:)?NCN)
    | (?P<name>NCN:\*|NCN(?::NCN)?)
    )""".replace("NCN", _NCNAME),
    re.VERBOSE,
)
_NODE_TYPES = frozenset({"comment", "text", "processing-instruction", "node"})
_OPERATOR_NAMES = frozenset({"and", "or", "mod", "div"})
_AFTER_OPERAND = frozenset({"@", "::", "(", "[", ",", "Operator"})
_OPERATORS = frozenset({"//", "/", "|", "+", "-", "=", "!=", "<", "<=", ">", ">="})


def tokenize_xpath(xpath: str) -> Iterator[Token]:
    """The tokens of `xpath` (XPath 1.0's lexical structure; YAX's short forms are made of
    the same tokens). Whitespace between tokens is skipped.

    Raises:
        MoxError: a character no token starts with; the message gives its offset.

    Example:
        >>> tokens = list(tokenize_xpath('//[@type="Dense"]'))
        >>> len(tokens), tokens[3].kind, tokens[3].value
        (7, 'NameTest', 'type')
    """
    position, last = 0, None
    while position < len(xpath):
        match = _LEXEME.match(xpath, position)
        if match is None or match.end() == position:
            if xpath[position:].strip() == "":
                return
            raise MoxError(
                f"`xpath` {xpath!r} has no token at offset {position} "
                f"({xpath[position : position + 10]!r})."
            )
        start = match.start(match.lastgroup or 0)
        text = match.group(match.lastgroup or 0)
        kind = _kind(match.lastgroup, text, last, xpath, match.end())
        token = Token(kind, text, start)
        position, last = match.end(), token
        yield token


def _kind(group: str | None, text: str, last: Token | None, xpath: str, end: int) -> str:
    after_operand = last is not None and last.kind not in _AFTER_OPERAND
    if group == "literal":
        return "Literal"
    if group == "number":
        return "Number"
    if group == "variable":
        return "VariableReference"
    if group == "punct":
        if text == "*":
            return "Operator" if after_operand else "NameTest"
        return "Operator" if text in _OPERATORS else text
    if after_operand and text in _OPERATOR_NAMES:
        return "Operator"
    rest = xpath[end:].lstrip()
    if rest.startswith("::"):
        return "AxisName"
    if rest.startswith("("):
        return "NodeType" if text in _NODE_TYPES else "FunctionName"
    return "NameTest"


#: Tokens after which a step starts, so that a `[` there is a step without a node test.
_STEP_START = frozenset({"/", "//", "|", "::", "("})


def yax_to_xpath(xpath: str) -> str | None:
    """`xpath` with YAX's short forms spelled in XPath 1.0, or `None` when it has none."""
    if xpath.strip() == "/":
        return "/*"
    try:
        tokens = list(tokenize_xpath(xpath))
    except MoxError:
        return None
    parts: list[str] = []
    offset = 0
    changed = False
    for i, token in enumerate(tokens):
        previous = tokens[i - 1].value if i else None
        following = tokens[i + 1].value if i + 1 < len(tokens) else None
        if token.value == "[" and (previous is None or previous in _STEP_START):
            parts.append(xpath[offset : token.start] + "*")
            offset, changed = token.start, True
        elif token.value == "//" and following in (None, "|", ")"):
            parts.append(xpath[offset : token.start] + "/descendant-or-self::*")
            offset, changed = token.start + 2, True
    if not changed:
        return None
    parts.append(xpath[offset:])
    return "".join(parts)
