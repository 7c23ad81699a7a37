"""A fast reader of text YSON for the files `dumps` writes: transcoded to JSON.

The YSON that bryo writes is JSON with other punctuation (`;` for `,`, `=` for `:`,
`#` for `null`) plus attributes: `<...>` maps on nodes (list items) and
`<"py"=%true>` tags on map values. `read_fast` rewrites such text into JSON with
string operations that run in C, parses it with `json.loads`, and returns the tree
`Reader.parse` returns for it, with offsets 0. Where the strings are is found with numpy
on the bytes (`_plain_json`); the punctuation is then rewritten in the whole text at
once, the few strings that hold punctuation (`"m.<locals>.Block"`) set aside meanwhile.
A text with many such strings has all its strings split out instead, the punctuation
between them rewritten (`_split_json`, the reader's first form: slower, same result).

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
from typing import Any, NamedTuple

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
#: `=<"py"=%true>"text"` in a text whose strings hold no punctuation (`_plain_json`);
#: the text may not be `"py"` (the splitting reader declines that, so this does too).
_PY_TAG_PLAIN = re.compile(r'=\s*<\s*"py"\s*=\s*%true\s*>\s*("(?!py")[^"]*")')
#: What `_rewritten` returns for a text outside the subset.
_DECLINED = "\x00declined"
_QUOTE = ord('"')
#: Strings holding punctuation `_plain_json` sets aside at most (more: `_split_json`).
_MAX_SET_ASIDE = 4096
#: Bytes a string may not hold for `_plain_json`: the punctuation it rewrites.
_PUNCTUATION_BYTES = np.zeros(256, np.bool_)
_PUNCTUATION_BYTES[list(b";=#<>%")] = True
_DEPTH_STEP = np.zeros(256, np.int8)
_DEPTH_STEP[[ord("["), ord("{"), ord("<")]] = 1
_DEPTH_STEP[[ord("]"), ord("}"), ord(">")]] = -1


#: What `_plain_json` returns for a text the splitting form must read.
_SPLIT: Any = object()


class _NotFast(Exception):
    """The text is outside what `read_fast` reads; the exact reader must read it."""


class _Marker:
    """The attributes of the next list item (what `<...>` became in JSON)."""

    __slots__ = ("attributes",)

    def __init__(self, attributes: Any) -> None:
        self.attributes = attributes


class FastJson(NamedTuple):
    """A text in the subset `read_fast` reads, as JSON (see the module docstring)."""

    #: the JSON text: node attributes as `{"\\u0000": {...}}` markers before their node,
    #: `py`-tagged values as `{"\\u0000": "py", "\\u0000v": text}` maps
    text: str
    #: how many keys its maps hold in all (markers' and tags' keys included) when no key
    #: appears twice in a map: `json.loads` keeps the last of duplicates, so a reader
    #: that counts fewer must leave the text to the exact reader, which names the key
    keys: int


def fast_json(raw: bytes, budget: Budget, max_nesting: int) -> FastJson | None:
    """The JSON form of `raw`, or `None` when the text is outside the subset (or over
    the limits): the first step of `read_fast`, for readers of their own."""
    if b"\\" in raw or b"\x00" in raw or b"\x01" in raw or b"\x02" in raw:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    converted = _plain_json(raw, text, budget, max_nesting)
    if converted is _SPLIT:
        converted = _split_json(text, budget, max_nesting)
    return None if converted is _SPLIT else converted


def read_fast(raw: bytes, budget: Budget, max_nesting: int) -> Any | None:
    """The tree `Reader(raw, budget, max_nesting).parse()` returns, or `None` when the
    text is outside the subset this reads (see the module docstring)."""
    converted = fast_json(raw, budget, max_nesting)
    if converted is None:
        return None
    objects = _Objects()
    try:
        wrapped = json.loads(
            converted.text, object_pairs_hook=objects, parse_int=_int64, strict=False
        )
        return objects.nodes(wrapped)
    except (_NotFast, ValueError, RecursionError):
        return None


def load_json(converted: FastJson) -> Any | None:
    """`converted` parsed by `json.loads` (maps as dicts, markers and tags as the maps
    `FastJson.text` holds), or `None` where `read_fast` would decline it for its
    content (an integer past 64 bits, too deep for the parser)."""
    try:
        return json.loads(converted.text, parse_int=_int64, strict=False)
    except (_NotFast, ValueError, RecursionError):
        return None


def _plain_json(raw: bytes, text: str, budget: Budget, max_nesting: int) -> FastJson | None:
    """The JSON form of `text` when no string in it holds YSON punctuation or `%` (the
    files `dumps` writes, but for a few): the punctuation is then rewritten in place,
    strings and all, with no splitting. `_SPLIT` when some string does (`_split_json`
    reads those), `None` when the text is outside the subset.

    Which bytes are in strings is found on the raw bytes: a byte is inside a string
    when an odd number of quotes precede it (there are no backslashes, so no escaped
    quotes); the parities are counted in one byte each (a sum modulo 256 keeps them)."""
    codes = np.frombuffer(raw, np.uint8)
    quotes = codes == _QUOTE
    inside = (np.cumsum(quotes, dtype=np.uint8) & 1).view(np.bool_)
    if inside.size and inside[-1]:
        return _SPLIT  # a string left open: the splitting reader declines it
    # the text with its strings emptied (`""`): what the checks of the subset look at
    bare = codes[~inside | quotes].tobytes().decode("latin-1")
    starts = np.flatnonzero(quotes)
    if _OUTSIDE.search(bare) or not _within_limits(bare, starts.size // 2, budget, max_nesting):
        return None
    # strings holding punctuation (`"a.<locals>.B"`) are set aside while it is rewritten
    odd = np.flatnonzero(_PUNCTUATION_BYTES[codes] & inside)
    if odd.size > _MAX_SET_ASIDE:
        return _SPLIT
    kept: list[str] = []
    if odd.size:
        # the string around each such byte: from the quote before it to the one after
        opening = np.unique(starts[np.searchsorted(starts, odd) - 1])
        closing = starts[np.searchsorted(starts, opening) + 1]
        pieces, last = [], 0
        for begin, end in zip(opening.tolist(), closing.tolist(), strict=True):
            pieces.append(raw[last : begin + 1])
            kept.append(raw[begin + 1 : end].decode("utf-8"))
            last = end
        pieces.append(raw[last:])
        text = "\x01".join(piece.decode("utf-8") for piece in pieces)
    text = _rewritten(_PY_TAG_PLAIN.sub(_py_tag_json, text))
    if text is _DECLINED:
        return None
    if not kept:
        return FastJson(text, _keys(bare))
    between = text.split("\x01")
    if len(between) != len(kept) + 1:  # pragma: no cover  -- the rewrites keep them
        return None
    out = [between[0]]
    for string, after in zip(kept, between[1:], strict=True):
        out.append(string)
        out.append(after)
    return FastJson("".join(out), _keys(bare))


def _py_tag_json(match: re.Match[str]) -> str:
    return ':{"\\u0000":"py","\\u0000v":' + match.group(1) + "}"


def _rewritten(text: str) -> str:
    """Tagged values already rewritten: the rest of the YSON punctuation as JSON, or
    `_DECLINED` when other attributes than `py` tags are on a value."""
    if _OTHER_VALUE_ATTRIBUTES.search(text):
        return _DECLINED
    text = _TRAILING.sub(r"\1", text)
    text = _SPECIAL.sub(lambda m: _SPECIAL_JSON[m.group()], text)
    for old, new in _PUNCTUATION:
        text = text.replace(old, new)
    return "[" + text + "]"


def _split_json(text: str, budget: Budget, max_nesting: int) -> FastJson | None:
    """The JSON form of `text`, the strings split out while the punctuation between them
    is rewritten (any string); `None` when the text is outside the subset."""
    parts = _STRING.split(text)
    strings = parts[1::2]
    separators = ["\x02" if s == '"py"' else "\x01" for s in strings]
    marked = parts[:]
    marked[1::2] = separators
    text = "".join(marked)
    if _OUTSIDE.search(text) or not _within_limits(text, len(strings), budget, max_nesting):
        return None
    keys = _keys(text)
    text = _rewritten(_PY_TAG.sub(lambda _: _PY_TAG_JSON, text))
    if text is _DECLINED:
        return None
    between = _SEPARATORS.split(text[1:-1])
    if len(between) != len(strings) + 1:  # pragma: no cover  -- the rewrites keep them
        return None
    parts[0::2] = between
    return FastJson("[" + "".join(parts) + "]", keys)


def _keys(bare: str) -> int:
    """The keys the JSON form of `bare` (a YSON text, strings emptied or marked) holds
    in its maps: one per `=`, and one per `<` (the key of the marker or tag it opens)."""
    return bare.count("=") + bare.count("<")


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
