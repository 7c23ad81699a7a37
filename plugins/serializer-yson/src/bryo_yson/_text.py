"""Text YSON: a bounded reader and a writer (the YTsaurus data format, text form).

`Reader.parse` reads any text YSON value (scalars, `#`, lists `[a; b]`, maps `{k = v}`, and
`<attributes>` on any value) iteratively: nesting and the number of values are checked
as it goes (`Limits.max_depth`-derived nesting, `Limits.max_nodes` values), so neither
deep nor huge input can exhaust the stack or memory, and every error carries the line,
column and path where it happened. Binary YSON is refused. A value with attributes
comes back as an `Attributed`; lists as Python lists, maps as dicts, `#` as `None`,
`%true`/`%false` as bools, integers (`1`, `1u`) as ints and doubles as floats.

`scalar` and `quote` write scalars in the same syntax, every string quoted.
"""

from __future__ import annotations

import bisect
import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from bryo_mox import MoxLimitError, MoxSerializationError
from bryo_mox.document import Budget, Source, decode

_TOKEN = re.compile(
    rb"""[ \t\r\n]*(?:
      (?P<string>"[^"\\]*(?:\\.[^"\\]*)*")
    | (?P<number>[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][-+]?[0-9]+)?u?)
    | (?P<special>%(?:true|false|nan|inf|\+inf|-inf))
    | (?P<word>[A-Za-z_][A-Za-z0-9_.\-]*)
    | (?P<punct>[\[\]{}<>;=\#])
    )""",
    re.VERBOSE | re.DOTALL,
)
_SPACE = re.compile(rb"[ \t\r\n]*")
_ESCAPE = re.compile(rb"\\(x[0-9A-Fa-f]{2}|[0-7]{1,3}|.)", re.DOTALL)
_SIMPLE_ESCAPES = {
    b"n": b"\n",
    b"r": b"\r",
    b"t": b"\t",
    b"a": b"\a",
    b"b": b"\b",
    b"f": b"\f",
    b"v": b"\v",
    b'"': b'"',
    b"'": b"'",
    b"\\": b"\\",
}
_SPECIALS = {
    b"%true": True,
    b"%false": False,
    b"%nan": math.nan,
    b"%inf": math.inf,
    b"%+inf": math.inf,
    b"%-inf": -math.inf,
}
_INT64 = (-(2**63), 2**63)
_UINT64 = 2**64


@dataclass
class Attributed:
    """A YSON value with attributes (`<k = v> value`), and where it starts in the text."""

    value: Any
    attributes: dict[str, Any]
    #: Left out of `repr`, so equal values have equal reprs (`_yson` keys attrs by them).
    offset: int = field(default=0, repr=False)


@dataclass
class _Frame:
    """An open container: a list, a map, or the attributes of the next value."""

    kind: bytes  # b"[", b"{" or b"<"
    items: Any
    offset: int
    key: str | None = None
    expect: str = "item"  # "item" (value or key), "separator", "equals"
    attributes: dict[str, Any] | None = None  # attributes parsed for the next value
    attributes_offset: int = 0


def _unescape(body: bytes) -> bytes:
    def one(match: re.Match[bytes]) -> bytes:
        code = match.group(1)
        if code[:1] == b"x" and len(code) == 3:
            return bytes([int(code[1:], 16)])
        if code[:1].isdigit():
            return bytes([int(code, 8) & 0xFF])
        return _SIMPLE_ESCAPES.get(code, b"\\" + code)

    return _ESCAPE.sub(one, body)


class Reader:
    """Reads one text YSON value (`parse`) and locates offsets in it (`locate`)."""

    def __init__(self, raw: bytes, budget: Budget, max_nesting: int) -> None:
        self.raw = raw
        self.budget = budget
        self.max_nesting = max_nesting
        self.values = 0
        self._line_starts: list[int] | None = None
        # attributes read for the top-level value (inside containers, frames hold them)
        self.attributes: dict[str, Any] | None = None
        self.attributes_offset = 0

    def where(self, offset: int, stack: list[_Frame] | None = None) -> dict[str, Any]:
        if self._line_starts is None:
            self._line_starts = [0, *(m.end() for m in re.finditer(rb"\n", self.raw))]
        line = bisect.bisect_right(self._line_starts, offset)
        where: dict[str, Any] = {
            "line": line,
            "position": offset - self._line_starts[line - 1] + 1,
        }
        if stack:
            where["path"] = _path(stack)
        return where

    def fail(self, message: str, offset: int, stack: list[_Frame]) -> MoxSerializationError:
        return MoxSerializationError(f"malformed YSON: {message}", **self.where(offset, stack))

    def scalar(self, match: re.Match[bytes], stack: list[_Frame]) -> Any:
        kind = _group(match)
        text = match.group(kind)
        if kind == "string":
            body = text[1:-1]
            if b"\\" in body:
                body = _unescape(body)
            try:
                return body.decode("utf-8")
            except UnicodeDecodeError:
                raise self.fail("a string is not UTF-8", match.start(kind), stack) from None
        if kind == "word":
            return text.decode("ascii")
        if kind == "special":
            return _SPECIALS[text]
        return self.number(text, match.start(kind), stack)

    def number(self, text: bytes, offset: int, stack: list[_Frame]) -> int | float:
        if text.endswith(b"u"):
            if not text[:-1].isdigit() or len(text) > 22 or int(text[:-1]) >= _UINT64:
                raise self.fail(f"{text[:40]!r} is not an unsigned 64-bit integer", offset, stack)
            return int(text[:-1])
        if text.lstrip(b"+-").isdigit():
            if len(text) > 21 or not _INT64[0] <= int(text) < _INT64[1]:
                raise self.fail(f"{text[:40]!r} does not fit a 64-bit integer", offset, stack)
            return int(text)
        return float(text)

    def check_value_count(self) -> None:
        """Refuse a text that surely holds more than `max_nodes` values before reading
        it value by value (which would take seconds to get there), located where a
        lower bound of the values read so far passes the limit (see `_first_over`)."""
        limit = self.budget.limits.max_nodes
        offset = _first_over(self.raw, limit + 1)  # (+1: a key counted before its `=`)
        if offset is not None:
            self.budget.check_nodes(limit + 1, **self.where(offset))

    def locate(self, source: Source) -> Source:
        """`source` (whose `hint` is a byte offset) with its line and column."""
        where = self.where(int(source.hint))
        return source._replace(line=where["line"], position=where["position"])

    def parse(self) -> Any:
        """Read the value (see the module docstring).

        Raises:
            MoxSerializationError: malformed or binary YSON, with line, position and path.
            MoxLimitError: nesting or value count over the limits.
        """
        raw, end = self.raw, len(self.raw)
        stack: list[_Frame] = []
        result: Any = _NOTHING
        position = 0
        while True:
            match = _TOKEN.match(raw, position)
            if match is None:
                position = _SPACE.match(raw, position).end()  # type: ignore[union-attr]  # `\s*` always matches
                if position >= end:
                    break
                if raw[position] < 0x20 or raw[position] > 0x7E:
                    raise self.fail(
                        "binary YSON (or a stray control byte) is not accepted; write text YSON",
                        position,
                        stack,
                    )
                raise self.fail(f"unexpected {raw[position : position + 10]!r}", position, stack)
            position = match.end()
            start = match.start(_group(match))
            frame = stack[-1] if stack else None
            if match.lastgroup == "punct":
                token = match.group("punct")
                result = self.punct(token, start, stack, result)
                continue
            if result is not _NOTHING and frame is None:
                raise self.fail("text after the end of the value", start, stack)
            if frame is not None and frame.kind != b"[" and frame.expect == "item":
                key = self.scalar(match, stack)
                if not isinstance(key, str):
                    raise self.fail("a map key must be a string", start, stack)
                if key in frame.items:
                    raise self.fail(f"key {key!r} appears twice", start, stack)
                frame.key, frame.expect = key, "equals"
                continue
            self.check_value_slot(frame, start, stack)
            result = self.complete(self.scalar(match, stack), start, stack, result)
        if stack:
            raise self.fail(
                f"the value is not closed (missing {_CLOSE[stack[-1].kind]!r})", end, stack
            )
        if result is _NOTHING:
            raise self.fail("the text holds no value", end, stack)
        return result

    def check_value_slot(self, frame: _Frame | None, offset: int, stack: list[_Frame]) -> None:
        if frame is None:
            return
        if frame.kind == b"[" and frame.expect == "item":
            return
        if frame.kind != b"[" and frame.expect == "value":
            return
        expected = {
            "separator": "';' or a closing bracket",
            "equals": "'='",
            "item": "a key",
        }.get(frame.expect, "a value")
        raise self.fail(f"expected {expected}", offset, stack)

    def punct(self, token: bytes, start: int, stack: list[_Frame], result: Any) -> Any:
        frame = stack[-1] if stack else None
        if token in (b"[", b"{", b"<"):
            holder: Any = frame if frame is not None else self
            if token == b"<" and holder.attributes is not None:
                raise self.fail("a value has two attribute maps", start, stack)
            if frame is None and result is not _NOTHING:
                raise self.fail("text after the end of the value", start, stack)
            self.check_value_slot(frame, start, stack)
            if len(stack) >= self.max_nesting:
                raise MoxLimitError(
                    f"YSON nested deeper than {self.max_nesting} levels; refusing to read it",
                    **self.where(start, stack),
                )
            self.count(start, stack)
            stack.append(_Frame(token, [] if token == b"[" else {}, start))
            return result
        if token in (b"]", b"}", b">"):
            if frame is None or _CLOSE[frame.kind] != token:
                raise self.fail(f"unexpected {token.decode()!r}", start, stack)
            if frame.expect in ("equals", "value") or frame.attributes is not None:
                raise self.fail(
                    f"unexpected {token.decode()!r} after a key or attributes", start, stack
                )
            stack.pop()
            if token == b">":
                parent = stack[-1] if stack else None
                holder = parent if parent is not None else self
                holder.attributes = frame.items
                holder.attributes_offset = frame.offset
                return result
            return self.complete(frame.items, frame.offset, stack, result, counted=True)
        if token == b"#":
            self.check_value_slot(frame, start, stack)
            return self.complete(None, start, stack, result)
        if token == b";":
            if frame is None or frame.expect != "separator":
                raise self.fail("unexpected ';'", start, stack)
            frame.expect = "item"
            return result
        if token == b"=":
            if frame is None or frame.expect != "equals":
                raise self.fail("unexpected '='", start, stack)
            frame.expect = "value"
            return result
        raise self.fail(f"unexpected {token!r}", start, stack)  # pragma: no cover

    def count(self, offset: int, stack: list[_Frame]) -> None:
        self.values += 1
        if self.values > self.budget.limits.max_nodes:
            self.budget.check_nodes(self.values, **self.where(offset, stack))

    def complete(
        self, value: Any, start: int, stack: list[_Frame], result: Any, counted: bool = False
    ) -> Any:
        """A value is read: wrap it with pending attributes, store it in its container."""
        if not counted:
            self.count(start, stack)
        frame = stack[-1] if stack else None
        holder: Any = frame if frame is not None else self
        if holder.attributes is not None:
            value = Attributed(value, holder.attributes, holder.attributes_offset)
            holder.attributes = None
        if frame is None:
            if result is not _NOTHING:
                raise self.fail("text after the end of the value", start, stack)
            return value
        if frame.kind == b"[":
            frame.items.append(value)
        else:
            frame.items[frame.key] = value
            frame.key = None
        frame.expect = "separator"
        return result


_NOTHING = object()
_CLOSE = {b"[": b"]", b"{": b"}", b"<": b">"}


def _path(stack: list[_Frame]) -> str:
    parts = []
    for frame in stack:
        if frame.kind == b"[":
            parts.append(str(len(frame.items)))
        elif frame.kind == b"<":
            parts.append("@" + (frame.key or ""))
        else:
            parts.append(frame.key or "")
    return "/" + "/".join(parts)


_PLAIN_STRING = re.compile(r"^[\x20-\x7e]*$")
_QUOTE_ESCAPES = re.compile(r'["\\]')


def quote(text: str) -> str:
    """A YSON string literal: `"..."` with `"`, `\\` and non-ASCII bytes escaped."""
    if _PLAIN_STRING.match(text):
        if '"' in text or "\\" in text:
            text = _QUOTE_ESCAPES.sub(lambda m: "\\" + m.group(0), text)
        return f'"{text}"'
    out = []
    for byte in text.encode("utf-8", "surrogatepass"):
        if byte in (0x22, 0x5C):
            out.append("\\" + chr(byte))
        elif 0x20 <= byte <= 0x7E:
            out.append(chr(byte))
        else:
            out.append(f"\\x{byte:02X}")
    return '"' + "".join(out) + '"'


#: `quote`, cached: for the short texts a file repeats (types, variable names, attribute
#: names); constants' data and other long texts go through `quote` (not kept alive).
cached_quote = functools.lru_cache(maxsize=1 << 16)(quote)


def scalar(value: bool | int | float | str | None) -> str:
    """The text of a YSON scalar (ints past int64 are written unsigned, `2**63u`)."""
    if value is None:
        return "#"
    if value is True:
        return "%true"
    if value is False:
        return "%false"
    if isinstance(value, int):
        return f"{value}u" if value >= _INT64[1] else str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "%nan"
        if math.isinf(value):
            return "%inf" if value > 0 else "%-inf"
        text = repr(value)
        return text if ("." in text or "e" in text) else text + "."
    return quote(value)


_QUOTE = ord('"')
_ESCAPED = re.compile(rb"\\.", re.DOTALL)
#: `_first_over`'s count of each byte outside strings: +1 for a value's opener or `#`,
#: -1 for `=` (the key before it is a string that is no value)
_VALUE_STEP = np.zeros(256, np.int8)
_VALUE_STEP[list(b"[{<#")] = 1
_VALUE_STEP[ord("=")] = -1
#: Bytes `_first_over` looks at at once (its memory: some 30 bytes per byte of a chunk).
_COUNT_CHUNK = 1 << 20


def _first_over(raw: bytes, limit: int) -> int | None:
    """The offset where a lower bound of the values `Reader.parse` counts passes
    `limit`, or `None` when the whole text stays within it.

    `parse` counts openers (`[`, `{`, `<`), `#` and scalars that are not map keys; the
    bound counts openers, `#` and quoted strings, less one per `=` (each follows a key,
    quoted or not). Strings are found by the parity of the quotes before each byte, after
    escapes are blanked (so `\\"` is no quote); counted with numpy, a chunk at a time."""
    if b"\\" in raw:
        raw = _ESCAPED.sub(b"__", raw)
    codes = np.frombuffer(raw, np.uint8)
    total, parity = 0, 0
    for begin in range(0, codes.size, _COUNT_CHUNK):
        chunk = codes[begin : begin + _COUNT_CHUNK]
        quotes = chunk == _QUOTE
        inside = ((np.cumsum(quotes, dtype=np.int64) + parity) & 1).astype(np.bool_)
        steps = np.where(inside | quotes, 0, _VALUE_STEP[chunk]).astype(np.int64)
        steps += quotes & inside  # an opening quote: a string
        running = np.cumsum(steps) + total
        over = np.flatnonzero(running > limit)
        if over.size:
            return begin + int(over[0])
        total = int(running[-1]) if running.size else total
        parity = int(inside[-1]) if inside.size else parity
    return None


def _group(match: re.Match[bytes]) -> str:
    """The name of the token `match` found (every alternative of `_TOKEN` is a named group)."""
    return cast(str, match.lastgroup)


#: How deeply an attribute value (a param) may nest.
MAX_VALUE_DEPTH = 64


def attr_value(value: Any, depth: int = 0) -> Any:
    """An attr value from YSON: lists become tuples, `<"py"=%true>` strings are decoded."""
    if depth > MAX_VALUE_DEPTH:
        raise MoxSerializationError(f"an attribute value nests deeper than {MAX_VALUE_DEPTH}.")
    if isinstance(value, Attributed):
        if value.attributes.get("py") is True and isinstance(value.value, str):
            return decode(value.value)
        raise MoxSerializationError(
            f"unexpected attributes {sorted(value.attributes)} on an attribute value"
        )
    if isinstance(value, list):
        return tuple(attr_value(v, depth + 1) for v in value)
    if isinstance(value, dict):
        raise MoxSerializationError("an attribute value may not be a YSON map")
    return value
