"""The fast (JSON) reader of text YSON: whatever it reads, the exact reader reads the
same; everything else (and every error) is left to the exact reader."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bryo_mox as yax
from bryo_mox import MoxLimitError, MoxSerializationError
from bryo_mox.document import Budget, Limits, loading, port_source
from bryo_mox.testing import MLP, Linear
from bryo_yson import _fast, _lines, _yson
from bryo_yson._fast import read_fast
from bryo_yson._text import Attributed, Reader, _first_over, quote, scalar

MAX_NESTING = 100
DEFAULT = Limits()


def exact(raw: bytes, limits: Limits = DEFAULT) -> Any:
    return Reader(raw, Budget(limits, len(raw)), MAX_NESTING).parse()


def fast(raw: bytes, limits: Limits = DEFAULT) -> Any:
    return read_fast(raw, Budget(limits, len(raw)), MAX_NESTING)


def plain(value: Any) -> Any:
    """`value` without offsets, NaN comparable: what the two readers must agree on."""
    if isinstance(value, Attributed):
        return ("attributed", plain(value.value), plain(value.attributes))
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return (type(value).__name__, value)


def agree(raw: bytes, limits: Limits = DEFAULT) -> bool:
    """`read_fast` declined, or read what `Reader` reads; True when it read it."""
    got = fast(raw, limits)
    try:
        want = exact(raw, limits)
    except MoxSerializationError:
        assert got is None, raw
        return False
    assert got is None or plain(got) == plain(want), raw
    return got is not None


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
)


def _values(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
        ),
        max_leaves=12,
    )


@st.composite
def _texts(draw: st.DrawFn) -> str:
    """YSON in the syntax `dumps` writes and more: nodes with attributes, `py` tags on
    map values, attributes elsewhere, trailing `;`, whitespace."""
    space = lambda: draw(st.sampled_from(["", " ", "\n  "]))

    def write(value: Any, depth: int) -> str:
        if isinstance(value, list):
            items = [write(v, depth + 1) for v in value]
            tail = ";" if items and draw(st.booleans()) else ""
            return "[" + space() + ";".join(items) + tail + "]"
        if isinstance(value, dict):
            items = [f"{quote(k)}{space()}={write(v, depth + 1)}" for k, v in value.items()]
            return "{" + ";".join(items) + "}"
        text = scalar(value)
        kind = draw(st.sampled_from(["plain", "plain", "py", "attributes"]))
        if kind == "py" and isinstance(value, str):
            return f'<"py"=%true>{text}'
        if kind == "attributes":
            return f'<"a"={scalar(1)}>{text}'
        return text

    def node(depth: int) -> str:
        attributes = draw(st.dictionaries(st.text(max_size=3), _values(_SCALARS), max_size=3))
        inner = ";".join(f"{quote(k)}={write(v, 0)}" for k, v in attributes.items())
        children = draw(st.integers(0, 2)) if depth < 3 else 0
        body = "[" + ";".join(node(depth + 1) for _ in range(children)) + "]" if children else "#"
        return f"<{inner}>{space()}{body}"

    return node(0) if draw(st.booleans()) else write(draw(_values(_SCALARS)), 0)


@settings(max_examples=300, deadline=None)
@given(_texts())
def test_what_the_fast_reader_reads_the_exact_reader_reads_the_same(text):
    agree(text.encode("utf-8", "surrogatepass"))


@settings(max_examples=300, deadline=None)
@given(_texts(), st.data())
def test_mutated_texts_are_read_the_same_or_left_to_the_exact_reader(text, data):
    raw = bytearray(text.encode("utf-8", "surrogatepass"))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(raw)))
        what = data.draw(
            st.sampled_from(
                [
                    b";",
                    b"=",
                    b"#",
                    b"<",
                    b">",
                    b"[",
                    b"]",
                    b"{",
                    b"}",
                    b'"',
                    b",",
                    b":",
                    b"u",
                    b"x",
                    b"%",
                    b"-",
                    b"1",
                    b".",
                ]
            )
        )
        if data.draw(st.booleans()) and at < len(raw):
            raw[at : at + 1] = what
        else:
            raw[at:at] = what
    agree(bytes(raw))


def at_most_what_the_exact_reader_counts(raw: bytes) -> None:
    """`_first_over`'s bound of the values stays within what `Reader` counts."""
    reader = Reader(raw, Budget(DEFAULT, len(raw)), MAX_NESTING)
    try:
        reader.parse()
    except MoxSerializationError:
        return
    assert _first_over(raw, reader.values) is None, raw


@settings(max_examples=300, deadline=None)
@given(_texts(), st.data())
def test_the_lower_bound_of_values_never_passes_the_count(text, data):
    raw = text.encode("utf-8", "surrogatepass")
    at_most_what_the_exact_reader_counts(raw)
    at = data.draw(st.integers(0, len(raw)))
    what = data.draw(st.sampled_from([b"=", b"#", b'"', b"\\", b'\\"', b"<", b"[", b"x", b"1"]))
    at_most_what_the_exact_reader_counts(raw[:at] + what + raw[at:])


@pytest.mark.parametrize("escape", [False, True])
def test_a_file_of_too_many_values_is_refused_before_it_is_read_value_by_value(
    toy, monkeypatch, escape
):
    model = MLP((4,) * 9, key=jax.random.key(0))
    text = yax.dumps(yax.make_mox(lambda m, v: m(v))(model, jnp.ones((2, 4))), "yson")
    if escape:  # outside the fast readers' subset: only the exact reader reads it
        text = text.replace('"name"="a"', '"name"="\\x61"', 1)
    assert isinstance(text, str)
    limits = Limits(max_nodes=300)

    def value_by_value(self: Reader) -> Any:
        raise AssertionError("read value by value (seconds for a file of millions)")

    monkeypatch.setattr(Reader, "parse", value_by_value)
    with pytest.raises(MoxLimitError, match=r"more than 300 nodes .*max_nodes") as info:
        yax.loads(text, "yson", limits=limits)
    # located where the values read so far are surely more than the limit
    line = info.value.line
    assert line is not None and 1 < line < text.count("\n")
    position = info.value.position
    assert position is not None
    monkeypatch.undo()
    with pytest.raises(MoxLimitError) as exact_info:  # the exact reader: a little before
        Reader(text.encode(), Budget(limits, len(text)), MAX_NESTING).parse()
    assert exact_info.value.line is not None and exact_info.value.line <= line


def test_the_files_dumps_writes_take_the_fast_path(toy):
    model = MLP((4, 4, 4), key=jax.random.key(0))
    mox = yax.make_mox(lambda m, v: jnp.tanh(m(v)).sum(axis=(1,)))(model, jnp.ones((2, 4)))
    assert agree(yax.dumps(mox, "yson").encode())


@pytest.mark.parametrize(
    "text",
    [
        b"[a;b]",  # unquoted words
        b'["a\\x41"]',  # escapes
        b"[1u]",  # unsigned
        b"[1,2]",  # JSON punctuation
        b'{"k"=<"a"=1>2}',  # attributes on a map value other than a py tag
        b'[<"a"=1>[<"b"=1>#]]',  # attributes inside a list that is not a node's
        b'{"a"=1;"a"=2}',  # a duplicate key
        b"[%true;true]",
    ],
)
def test_texts_outside_the_subset_are_left_to_the_exact_reader(text):
    assert fast(text) is None


def test_limits_are_checked_before_parsing():
    many = b"[" + b"1;" * 5_000 + b"]"
    assert fast(many, Limits(max_nodes=1_000)) is None
    with pytest.raises(MoxLimitError):
        exact(many, Limits(max_nodes=1_000))
    deep = b"[" * (MAX_NESTING + 1) + b"]" * (MAX_NESTING + 1)
    assert fast(deep) is None
    assert fast(b"[" * MAX_NESTING + b"]" * MAX_NESTING) is not None


def test_errors_after_the_fast_path_name_line_and_path(toy):
    model = MLP((4, 4), key=jax.random.key(0))
    text = yax.dumps(yax.make_mox(lambda m, v: m(v))(model, jnp.ones((2, 4))), "yson")
    bad = text.replace('"type"="f32[2,4]"', '"type"="f32[9]"')
    assert fast(bad.encode()) is not None
    with pytest.raises(MoxSerializationError) as info:
        yax.loads(bad, "yson")
    assert info.value.line is not None and info.value.line > 1
    assert info.value.path is not None and info.value.path.startswith("/0")


# `read_fast` rewrites the whole text when few strings hold punctuation (`_plain_json`),
# else splits every string out (`_split_json`); both must give the exact reader's tree.


@settings(max_examples=150, deadline=None)
@given(_texts())
def test_the_splitting_form_reads_the_same(text):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_fast, "_MAX_SET_ASIDE", -1)  # every text takes `_split_json`
        agree(text.encode("utf-8", "surrogatepass"))


@pytest.mark.parametrize("limit", [4096, -1])
def test_strings_holding_punctuation_are_set_aside(limit, monkeypatch):
    monkeypatch.setattr(_fast, "_MAX_SET_ASIDE", limit)
    names = ['"m.<locals>.Block"', '"a;b=c#d%e>"', '"py"', '"<"']
    text = (
        '<"primitive"="module_call";"qualtype"='
        + names[0]
        + ';"x"=<"py"=%true>'
        + names[1]
        + ';"inputs"=[{"type"="f32[2]";"name"='
        + names[2]
        + "}]>["
        + '<"primitive"='
        + names[3]
        + ';"v"=<"py"=%true>"1;2">#]'
    ).encode()
    assert agree(text)
    tree = fast(text)
    assert tree.attributes["qualtype"] == "m.<locals>.Block"
    assert tree.attributes["x"].value == "a;b=c#d%e>"
    assert tree.value[0].attributes["v"].attributes == {"py": True}


def test_a_text_of_strings_only_outside_the_subset_is_declined_by_both_forms(monkeypatch):
    for limit in (4096, -1):
        monkeypatch.setattr(_fast, "_MAX_SET_ASIDE", limit)
        assert fast(b'["a<b" x]') is None  # an unquoted word after a string
        assert fast(b'["open') is None  # a string left open
        assert fast(b'{"k"="a";"k"="b<"}') is None  # a duplicate key


# `loads` builds the document from the JSON form directly (`_yson._JsonBuilder`); it must
# give what `_yson._Builder` makes of the exact reader's tree, or decline.


def exact_document(raw: bytes, limits: Limits = DEFAULT) -> Any:
    reader = Reader(raw, Budget(limits, len(raw)), MAX_NESTING)
    return _yson._Builder(reader.locate).document(reader.parse())


def json_document(raw: bytes, limits: Limits = DEFAULT) -> Any:
    budget = Budget(limits, len(raw))
    converted = _fast.fast_json(raw, budget, MAX_NESTING)
    value = _fast.load_json(converted) if converted is not None else None
    if value is None:
        return None
    locate = _yson._ByPath(Reader(raw, budget, MAX_NESTING))
    return _yson._JsonBuilder(locate).document(value, converted.keys)


def doc_tree(doc: Any) -> Any:
    """A document as plain values (sources by path, arrays by bytes) for comparisons."""

    def path(port: Any) -> str:  # where an error at the port points (`port_source`)
        where = port_source(doc, port)
        return (where.resolve(where) if where.resolve is not None else where).path

    def ports(items: list[Any]) -> list[Any]:
        return [(p.name, p.type, plain(p.value), p.bind, path(p)) for p in items]

    return (
        doc.tag,
        {k: plain(v.tobytes() if isinstance(v, np.ndarray) else v) for k, v in doc.attrs.items()},
        [(c.name, c.type, c.data.tobytes(), c.source.path) for c in doc.consts],
        ports(doc.inputs),
        ports(doc.outputs),
        ports(doc.results),
        [doc_tree(child) for child in doc.children],
        doc.source.path,
    )


def built_as_exact(read: Any, raw: bytes) -> bool:
    """`read(raw)` declined (None), or built what the exact path builds; True when it built."""
    got = read(raw)
    try:
        want = exact_document(raw)
    except MoxSerializationError:
        assert got is None, raw
        return False
    assert got is None or doc_tree(got) == doc_tree(want), raw
    return got is not None


def same_documents(raw: bytes) -> bool:
    """The JSON builder declined, or built what the exact path builds; True when it built."""
    return built_as_exact(json_document, raw)


_PY_VALUES = st.sampled_from(
    ["(1, 2)", "dtype('float32')", "array('AACAPw==', dtype('float32'), (1,))"] * 4 + ["("]
)


@st.composite
def _node_texts(draw: st.DrawFn) -> str:
    """MoX-like YSON nodes: a `primitive`, ports (named, literal, bound, malformed),
    constants and attributes (`py` tags among them), some keys twice or mistyped."""
    odd = lambda: draw(st.integers(0, 39)) == 17  # a malformed or unusual item, sometimes
    bad_names, bad_types = ["1", "#", '<"py"=%true>"a"'], ["3", '"f32["']
    names = lambda: draw(st.sampled_from(bad_names if odd() else ['"a"', '"b"']))
    types = lambda: draw(st.sampled_from(bad_types if odd() else ['"f32[2]"', '"i32[]"']))
    values = st.sampled_from(["1", "2.5", "%true", "#", "[1;2]", '<"py"=%true>"(1, 2)"'])

    def port() -> str:
        items = [f'"type"={types()}']
        kinds = ["none", "twice"] if odd() else ["name", "name", "value", "bind"]
        kind = draw(st.sampled_from(kinds))
        if kind in ("name", "bind", "twice"):
            items.append(f'"name"={names()}')
        if kind == "value":
            items.append(f'"value"={draw(values)}')
        if kind == "bind":
            items.append(f'"bind"={names()}')
        if kind == "twice":
            items.append(f'"name"={names()}')
        return "{" + ";".join(draw(st.permutations(items))) + "}"

    def attribute() -> str:
        name = '"x"' if odd() else draw(st.sampled_from(['"y"', '"z"']))
        kind = draw(st.sampled_from(["map"] if odd() else ["value", "py"]))
        if kind == "py":
            return f'{name}=<"py"=%true>{quote(draw(_PY_VALUES))}'
        if kind == "map":
            return f'{name}={{"k"=1}}'
        return f"{name}={draw(values)}"

    def node(depth: int) -> str:
        tag = "1" if odd() else draw(st.sampled_from(['"add"', '"sin"']))
        items = [f'"primitive"={tag}']
        kinds = st.sampled_from(["inputs", "outputs", "results"])
        for kind in draw(st.lists(kinds, max_size=3, unique=not odd())):
            ports = [port() for _ in range(draw(st.integers(0, 2)))]
            items.append(f'"{kind}"=[' + ";".join(ports) + "]")
        if draw(st.integers(0, 4)) == 0:
            data = '"AACAPwAAgD8="' if odd() else '"AACAPw=="'
            items.append(f'"consts"=[{{"name"="k";"type"="f32[1]";"data"={data}}}]')
        items.extend(attribute() for _ in range(draw(st.integers(0, 1))))
        children = draw(st.integers(0, 2)) if depth < 2 else 0
        body = "[" + ";".join(node(depth + 1) for _ in range(children)) + "]" if children else "#"
        if odd():
            body = draw(st.sampled_from(["1", '"s"', "{}", "[1]"]))
        return "<" + ";".join(draw(st.permutations(items))) + ">" + body

    return node(0)


@settings(max_examples=300, deadline=None)
@given(_node_texts())
def test_the_json_builder_builds_what_the_exact_path_builds_or_declines(text):
    same_documents(text.encode())


X = jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)


def test_files_dumps_writes_are_built_from_their_json_form(toy):
    layer = Linear(4, 4, key=jax.random.key(3))

    def f(v):
        ys = jax.lax.scan(lambda c, e: (layer(c) + e, c.sum()), v[0], v)
        return ys, jnp.tanh(v) * 0.5, jnp.asarray([1.0, 2.0]) + v[0, :2]

    model = MLP((4, 4, 4), key=jax.random.key(0))
    for mox in (yax.make_mox(f)(X), yax.make_mox(lambda m, v: m(v) + 1.0)(model, X)):
        text = yax.dumps(mox, "yson").encode()
        assert same_documents(text)


def test_a_declined_json_form_leaves_the_array_budget_to_the_exact_reader():
    # the constant's 4 bytes are counted by the JSON builder, which then declines (the
    # duplicate key); the exact reader counts them again, from the whole budget
    text = (
        b'<"primitive"="mox";"consts"=[{"name"="k";"type"="f32[1]";"data"="AACAPw=="}];'
        b'"inputs"=[{"type"="f32[1]";"name"="a";"name"="b"}]>#'
    )
    limits = Limits(array_bytes=4)
    assert json_document(text, limits) is None
    with pytest.raises(MoxSerializationError, match="appears twice") as info:
        yax.loads(text, "yson", limits=limits)
    assert not isinstance(info.value, MoxLimitError)


# `loads` reads the files `dumps` writes line by line (`_lines.read_lines`): it must build
# what the exact path builds (which the same MoX loads from), or decline.


def line_document(raw: bytes, limits: Limits = DEFAULT) -> Any:
    budget = Budget(limits, len(raw))
    locate = _yson._ByPath(Reader(raw, budget, MAX_NESTING))
    return _lines.read_lines(raw.decode("utf-8"), budget, MAX_NESTING, locate)


def same_as_exact(raw: bytes) -> bool:
    """The line reader declined, or built what the exact path builds; True when it built."""
    return built_as_exact(line_document, raw)


_LINE_NAMES = ['"a"', '"b"']
_TYPES, _ODD_TYPES = ['"f32[2]"', '"i32[]"'], ["3", '"f32["']
_TAGS, _ODD_TAGS = ['"add"', '"sin"'], ["1", '""']
_LINE_VALUES = ["1", "-2", "2.5", "%true", "%nan", '"s"']
_ODD_LINE_VALUES = ["#", "1u", "word", "[1;2]", "{}", '<"py"=%true>"(1, 2)"', '<"a"=1>1', "1;2"]
_PARAM_LINE_VALUES = [*_LINE_VALUES, '[1;[2;"s"]]', "[]", '<"py"=%true>"(1, 2)"']
_ODD_PARAMS = [
    '{"k"=1}',
    "#",
    "word",
    "[1;",
    '<"py"=%true>"("',
    '<"py"=%false>"1"',
    "[[[[[[[]]]]]]]",
]
_ARRAY = "<\"py\"=%true>\"array('AACAPw==', dtype('float32'), (1,))\""


@st.composite
def _line_texts(draw: st.DrawFn) -> str:
    """Texts in the layout `dumps` writes (one node per line), with unusual or malformed
    items now and then: ports with a bind, no name or a name twice, params named like
    the reserved attributes or twice, other attributes, items out of order, `;` missing
    or extra, literal and param values the line reader leaves to the exact reader."""
    odd = lambda: draw(st.integers(0, 24)) == 7

    def pick(usual: list[str], unusual: list[str]) -> str:
        return draw(st.sampled_from(unusual if odd() else usual))

    def port() -> str:
        items = [f'"type"={pick(_TYPES, _ODD_TYPES)}']
        kind = pick(["name", "name", "value"], ["bind", "none", "twice", "empty"])
        if kind in ("name", "bind", "twice"):
            items.append(f'"name"={pick(_LINE_NAMES, ["1", "#"])}')
        if kind == "empty":
            items.append('"name"=""')
        if kind == "value":
            items.append(f'"value"={pick(_LINE_VALUES, _ODD_LINE_VALUES)}')
        if kind == "bind":
            items.append('"bind"="c"')
        if kind == "twice":
            items.append('"name"="c"')
        return "{" + ";".join(items[::-1] if odd() else items) + "}"

    def head() -> str:
        items = [f'"primitive"={pick(_TAGS, _ODD_TAGS)}']
        for _ in range(draw(st.integers(0, 2))):
            name = pick(['"x"', '"y"'], ['"inputs"', '"primitive"', '""'])
            value = pick(_PARAM_LINE_VALUES, _ODD_PARAMS)
            value = _ARRAY if draw(st.integers(0, 5)) == 0 else value
            items.append(f"{name}={value}")
        for kind in ("inputs", "outputs", "results"):
            if kind == "outputs" and draw(st.booleans()) and not odd():
                continue  # `dumps` leaves out an empty list of outputs
            ports = ";".join(port() for _ in range(draw(st.integers(0, 2))))
            items.append(f'"{kind}"=[{ports}]')
        if draw(st.integers(0, 4)) == 0:
            data = pick(['"AACAPw=="'], ['"AACAPwAAgD8="', '"!"'])
            items.append(f'"consts"=[{{"name"="k";"type"="f32[1]";"data"={data}}}]')
        if odd():
            items = draw(st.permutations(items))
        return "<" + ";".join(items) + ">"

    def lines(depth: int, out: list[str]) -> None:
        pad, end = "  " * depth, ";" if depth else ""
        if odd():
            end = "" if end else ";"
        children = draw(st.integers(0, 2)) if depth < 3 else 0
        if children:
            out.append(f"{pad}{head()}[")
            for _ in range(children):
                lines(depth + 1, out)
            out.append(f"{pad}]{end}")
        else:
            out.append(f"{pad}{head()}#{end}")

    out: list[str] = []
    lines(0, out)
    return "\n".join(out) + pick(["\n"], ["", "\n\n", "\n#\n"])


@settings(max_examples=400, deadline=None)
@given(_line_texts())
def test_the_line_reader_builds_what_the_exact_path_builds_or_declines(text):
    same_as_exact(text.encode())


@settings(max_examples=200, deadline=None)
@given(_line_texts(), st.data())
def test_mutated_line_texts_are_built_the_same_or_declined(text, data):
    raw = bytearray(text.encode())
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(raw)))
        what = data.draw(st.sampled_from(list(b';=#<>[]{}",\n u%-1.\\')))
        if data.draw(st.booleans()) and at < len(raw):
            raw[at] = what
        else:
            raw.insert(at, what)
    same_as_exact(bytes(raw))


def _line_models(toy: Any) -> list[yax.Mox]:
    layer = Linear(4, 4, key=jax.random.key(3))

    def scanned(v):
        ys = jax.lax.scan(lambda c, e: (layer(c) + e, c.sum()), v[0], v)
        return ys, jnp.tanh(v) * 0.5, jnp.asarray([1.0, 2.0]) + v[0, :2]

    model = MLP((4, 4, 4), key=jax.random.key(0))
    return [
        yax.make_mox(scanned)(X),
        yax.make_mox(lambda m, v: m(v) + 1.0)(model, X),
        yax.make_mox(lambda m, v: jax.nn.relu(m(v)) * 2)(model, X),
    ]


def test_files_dumps_writes_are_read_line_by_line_into_the_exact_document(toy):
    for mox in _line_models(toy):
        raw = yax.dumps(mox, "yson").encode()
        assert same_as_exact(raw)


def test_the_line_path_and_the_exact_path_load_the_same_mox(toy, monkeypatch):
    for mox in _line_models(toy):
        text = yax.dumps(mox, "yson")
        fast = yax.loads(text, "yson")
        monkeypatch.setattr(_yson, "read_lines", lambda *args: None)
        monkeypatch.setattr(_yson, "fast_json", lambda *args: None)
        exact = yax.loads(text, "yson")
        monkeypatch.undo()
        assert yax.dumps(fast, "yson") == yax.dumps(exact, "yson")
        assert yax.pformat(fast) == yax.pformat(exact)


def test_errors_after_the_line_path_name_the_line_and_path(toy):
    model = MLP((4, 4), key=jax.random.key(0))
    text = yax.dumps(yax.make_mox(lambda m, v: m(v))(model, jnp.ones((2, 4))), "yson")
    lines = text.splitlines(keepends=True)
    (at,) = [i for i, line in enumerate(lines) if '"primitive"="dot_general"' in line]
    lines[at] = lines[at].replace('"type"="f32[2,4]"', '"type"="f32[9]"', 1)
    bad = "".join(lines)
    assert line_document(bad.encode()) is not None  # the line reader reads it
    with pytest.raises(MoxSerializationError, match=r"f32\[9\]") as info:
        yax.loads(bad, "yson")
    assert info.value.line == at + 1
    assert info.value.path is not None and info.value.path.endswith("/@inputs/0")


def test_limits_are_checked_before_the_line_reader_allocates(toy):
    model = MLP((4, 4, 4, 4), key=jax.random.key(0))
    raw = yax.dumps(yax.make_mox(lambda m, v: m(v))(model, X), "yson").encode()
    assert line_document(raw) is not None
    assert line_document(raw, Limits(max_nodes=50)) is None
    with pytest.raises(MoxLimitError):
        yax.loads(raw, "yson", limits=Limits(max_nodes=50))
    assert line_document(raw, Limits(max_depth=2)) is None
    with pytest.raises(MoxLimitError):
        yax.loads(raw, "yson", limits=Limits(max_depth=2))


def test_a_declined_text_leaves_the_array_budget_to_the_next_reader():
    # the constant's 4 bytes are counted on the first line, then the second line is
    # outside the layout (a port with a bind); the next reader counts them again
    text = (
        b'<"primitive"="mox";"inputs"=[];"results"=[];'
        b'"consts"=[{"name"="k";"type"="f32[1]";"data"="AACAPw=="}]>[\n'
        b'  <"primitive"="sin";"inputs"=[{"type"="f32[1]";"name"="k";"bind"="z"}];'
        b'"results"=[]>#;\n'
        b"]\n"
    )
    limits = Limits(array_bytes=4)
    with loading(len(text), limits):
        budget = _yson.current_budget(len(text))
        assert _lines.read_lines(text.decode(), budget, MAX_NESTING, lambda s: s) is None
        assert budget.array_bytes_left == 4


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from('"[]{}<>#;=ab é\n')))
def test_the_line_readers_value_bound_counts_ascii_and_other_text_alike(text):
    tokens = text.count('"') // 2 + sum(map(text.count, "[{<]}>#;")) + 1
    for max_nodes, within in ((tokens, True), (tokens - 1, False)):
        budget = Budget(Limits(max_nodes=max_nodes), len(text))
        assert _lines._within_limits(text, budget) is within


@pytest.mark.parametrize(
    ("edit", "path", "message"),
    [
        (
            ('{"type"="f32[2]";"name"="c"}];"outputs"', '{"type"="f32[2]";"name"="z"}];"outputs"'),
            "/0/@inputs/2",
            "`z` is used",
        ),
        (
            (
                '{"type"="f32[2]";"name"="b"};{"type"="f32[2]";"name"="c"}];"o',
                '{"type"="f32[3]";"name"="b"};{"type"="f32[2]";"name"="c"}];"o',
            ),
            "/0/@inputs/1",
            r"declares `b` as f32\[3\]",
        ),
        (('"name"="e"}];"results"=[]', '"name"="a"}];"results"=[]'), "/1/@outputs/0", "`a` twice"),
        (
            ('{"type"="f32[2]";"name"="c"}];"results"', '{"type"="f32[2]";"name"="a"}];"results"'),
            "/@inputs/2",
            "`a` twice",
        ),
    ],
)
def test_errors_at_ports_of_a_list_name_the_port(bryo_plugin_manager, edit, path, message):
    # the line reader gives a list's ports one source; an error names the port's index
    x = jnp.ones((2,))
    f = lambda a, b, c: jnp.concatenate([a, b, c]) * 2.0
    text = yax.dumps(yax.make_mox(f)(x, x, x), format="yson")
    broken = text.replace(*edit, 1)
    assert broken != text
    with loading(len(broken)) as budget:  # the fast reader reads it
        assert _lines.read_lines(broken, budget, 99, lambda s: s) is not None
    with pytest.raises(MoxSerializationError, match=message) as error:
        yax.loads(broken, format="yson")
    assert error.value.path == path and error.value.line == (
        1 if path[1] == "@" else 2 + int(path[1])
    )
