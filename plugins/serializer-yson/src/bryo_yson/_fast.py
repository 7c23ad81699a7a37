"""A fast reader of text YSON for the files `dumps` writes: transcoded to JSON.

The YSON that bryo writes is JSON with other punctuation (`;` for `,`, `=` for `:`,
`#` for `null`) plus attributes: `<...>` maps on nodes (list items) and
`<"py"=%true>` tags on map values. `read_fast` rewrites such text into JSON with
string operations that run in C (the strings are split out; the punctuation between
them is rewritten by regexes and `str.translate`), parses it with `json.loads`, and
returns the tree `Reader.parse` returns for it, with offsets 0.

It returns `None` for anything outside that subset (escapes in strings, unquoted
words, unsigned integers, other attributes, duplicate keys, more values or deeper
nesting than the limits may allow): the caller then reads the text with the exact
`Reader`, which gives the same tree or the located error. Whatever `read_fast`
accepts, `Reader` reads the same (the tests compare both on random and mutated texts).
The limits are checked before `json.loads` allocates anything: the nesting is measured
on the punctuation, and the number of values bounded from above by counting tokens.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from bryo_mox.document import Budget

from ._text import _INT64, Attributed

_STRING = re.compile(r'("[^"\\]*")')
_SEPARATORS = re.compile("[\x01\x02]")
#: Text (strings taken out) outside the subset: unquoted words, JSON-only punctuation,
#: backslashes, signs before specials, unsigned integers, `;` after an opener or `;`.
#: (Every branch starts with a character set, the word's lookbehinds come after its
#: letter: the regex engine then skips other characters fast.)
_OUTSIDE = re.compile(
    r"[A-Za-z_](?<![%A-Za-z0-9_.][A-Za-z_])(?<!%[-+][A-Za-z_])|[,:\\]|[-+]%|[0-9]u|[\[{<;]\s*;"
)
#: `="key"=<"py"=%true>"text"` (the key's `=` on), strings as \x01, `"py"` as \x02.
_PY_TAG = re.compile(r"=\s*<\s*\x02\s*=\s*%true\s*>\s*\x01")
_PY_TAG_JSON = ':{"\\u0000":\x02,"\\u0000v":\x01}'
_OTHER_VALUE_ATTRIBUTES = re.compile(r"=\s*<")
_TRAILING = re.compile(r";(\s*[\]}>])")
_SPECIAL = re.compile(r"%(?:true|false|nan|inf|\+inf|-inf)")
_SPECIAL_JSON = {
    "%true": "true",
    "%false": "false",
    "%nan": "NaN",
    "%inf": "Infinity",
    "%+inf": "Infinity",
    "%-inf": "-Infinity",
}
_PUNCTUATION = ((";", ","), ("=", ":"), ("#", "null"), ("<", '{"\\u0000":{'), (">", "}},"))
_DEPTH_STEP = np.zeros(256, np.int8)
_DEPTH_STEP[[ord("["), ord("{"), ord("<")]] = 1
_DEPTH_STEP[[ord("]"), ord("}"), ord(">")]] = -1


class _NotFast(Exception):
    """The text is outside what `read_fast` reads; the exact reader must read it."""


class _Marker:
    """The attributes of the next list item (what `<...>` became in JSON)."""

    __slots__ = ("attributes",)

    def __init__(self, attributes: Any) -> None:
        self.attributes = attributes


def read_fast(raw: bytes, budget: Budget, max_nesting: int) -> Any | None:
    """The tree `Reader(raw, budget, max_nesting).parse()` returns, or `None` when the
    text is outside the subset this reads (see the module docstring)."""
    if b"\\" in raw or b"\x00" in raw or b"\x01" in raw or b"\x02" in raw:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    parts = _STRING.split(text)
    strings = parts[1::2]
    separators = ["\x02" if s == '"py"' else "\x01" for s in strings]
    marked = parts[:]
    marked[1::2] = separators
    text = "".join(marked)
    if _OUTSIDE.search(text) or not _within_limits(text, len(strings), budget, max_nesting):
        return None
    text = _PY_TAG.sub(lambda _: _PY_TAG_JSON, text)
    if _OTHER_VALUE_ATTRIBUTES.search(text):
        return None
    text = _TRAILING.sub(r"\1", text)
    text = _SPECIAL.sub(lambda m: _SPECIAL_JSON[m.group()], text)
    for old, new in _PUNCTUATION:
        text = text.replace(old, new)
    between = _SEPARATORS.split(text)
    if len(between) != len(strings) + 1:  # pragma: no cover  -- the rewrites keep them
        return None
    parts[0::2] = between
    objects = _Objects()
    try:
        wrapped = json.loads(
            "[" + "".join(parts) + "]",
            object_pairs_hook=objects,
            parse_int=_int64,
            strict=False,
        )
        return objects.nodes(wrapped)
    except (_NotFast, ValueError, RecursionError):
        return None


def _within_limits(text: str, strings: int, budget: Budget, max_nesting: int) -> bool:
    """Nesting at most `max_nesting` and at most `max_nodes` values (an upper bound:
    every value is a string, an opener, `#`, or a token before `;` or a closer)."""
    opens = sum(map(text.count, "[{<"))
    closes = sum(map(text.count, "]}>"))
    bound = strings + opens + closes + text.count("#") + text.count(";") + 1
    if bound > budget.limits.max_nodes:
        return False
    steps = _DEPTH_STEP[np.frombuffer(text.encode("ascii", "replace"), np.uint8)]
    return not steps.size or int(np.cumsum(steps, dtype=np.int32).max()) <= max_nesting


def _int64(text: str) -> int:
    value = int(text)
    if not _INT64[0] <= value < _INT64[1]:
        raise _NotFast
    return value


class _Objects:
    """`json.loads`' object hook: maps (duplicate keys refused), the attributes markers
    of list items, and `py`-tagged map values; then pairs markers with their items."""

    def __init__(self) -> None:
        self.markers = 0
        self.paired = 0

    def __call__(self, pairs: list[tuple[str, Any]]) -> Any:
        if pairs and pairs[0][0] == "\x00":
            if len(pairs) == 1:
                self.markers += 1
                return _Marker(pairs[0][1])
            if len(pairs) != 2 or pairs[1][0] != "\x00v":  # pragma: no cover
                raise _NotFast  # only `_PY_TAG_JSON` writes such keys
            return Attributed(pairs[1][1], {"py": True})
        value = dict(pairs)
        if len(value) != len(pairs):
            raise _NotFast  # the exact reader names the key that appears twice
        return value

    def nodes(self, wrapped: list[Any]) -> Any:
        """The top value, with markers folded into the items of node lists."""
        top = self.pair(wrapped)
        if len(top) != 1:
            raise _NotFast
        stack = [top[0]]
        while stack:
            node = stack.pop()
            if isinstance(node, Attributed) and type(node.value) is list:
                node.value = self.pair(node.value)
                stack.extend(node.value)
        if self.paired != self.markers:
            raise _NotFast  # attributes somewhere else than on a node
        return top[0]

    def pair(self, items: list[Any]) -> list[Any]:
        out = []
        values = iter(items)
        for item in values:
            if type(item) is _Marker:
                value = next(values, item)
                if type(value) is _Marker:
                    raise _NotFast
                self.paired += 1
                item = Attributed(value, item.attributes)
            out.append(item)
        return out
