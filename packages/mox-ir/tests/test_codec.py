import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bryo_mox import MoxError
from bryo_mox.document import decode, decode_attr, encode, encode_attr, parse_type, type_str

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False),
    st.text(max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.tuples(inner, inner), st.lists(inner, max_size=3)),
    max_leaves=8,
)


@given(values)
def test_encode_decode_round_trip(value):
    assert decode(encode(value)) == value


@given(values)
def test_attr_round_trip(value):
    assert decode_attr(encode_attr(value)) == value


def test_jax_values_round_trip():
    dims = jax.lax.GatherDimensionNumbers(
        offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,)
    )
    for value in (
        np.dtype("float32"),
        jnp.dtype("bfloat16"),
        jax.lax.Precision.HIGHEST,
        dims,
        float("inf"),
        (jax.lax.GatherScatterMode.CLIP, None),
    ):
        assert decode(encode(value)) == value


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os')",
        "open('/etc/passwd')",
        "(1).__class__",
        "[x for x in ()]",
        "dtype(1)",
        "float('1e9999')",
        "lambda: 1",
    ],
)
def test_decode_refuses_code(text):
    with pytest.raises(MoxError):
        decode(text)


@given(
    st.lists(st.integers(0, 5), max_size=4),
    st.sampled_from(["f32", "bf16", "i8", "bool", "u32"]),
    st.booleans(),
)
def test_type_strings(shape, dtype, weak):
    aval = parse_type(
        f"{dtype}[{','.join(map(str, shape))}]{{weak}}"
        if weak
        else f"{dtype}[{','.join(map(str, shape))}]"
    )
    assert aval.shape == tuple(shape) and aval.weak_type == weak
    assert type_str(aval, weak=True) == f"{dtype}[{','.join(map(str, shape))}]" + (
        "{weak}" if weak else ""
    )
    assert parse_type("fp32[2,3]").dtype == jnp.float32


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="aZ_1.5e-/<>()", max_size=12))
def test_decode_attr_reads_paths_and_qualified_names_as_decode_would(text):
    try:
        want = decode(text)
    except MoxError:
        want = text
    got = decode_attr(text)
    assert type(got) is type(want) and (got == want or got != got)


@settings(max_examples=200)
@given(values, values, st.booleans())
def test_value_key_is_equal_only_for_values_written_alike(a, b, mutable):
    from bryo_mox._codec import value_key  # the cache key of params (writer) and attrs (loader)

    key_a, key_b = value_key(a, mutable=mutable), value_key(b, mutable=mutable)
    if key_a is not None and key_a == key_b:
        assert encode(a) == encode(b) and type(a) is type(b)
    if encode(a) == encode(b) and type(a) is type(b) and key_a is not None:
        assert key_a == key_b


def test_value_key_keeps_types_apart():
    from bryo_mox._codec import value_key

    keys = [value_key(v) for v in (1, True, 1.0, -0.0, 0.0, (1,), (True,), [1], "1")]
    assert keys[-2] is None  # lists are not keyed for the writer (mutable)
    known = [k for k in keys if k is not None]
    assert len(set(known)) == len(known)
    assert value_key((np.zeros(2),)) is None
    mutable = [value_key(v, mutable=True) for v in ([1], (1,), np.zeros(2), np.zeros(2, np.int32))]
    assert None not in mutable and len(set(mutable)) == len(mutable)
    assert value_key({"a": [1]}, mutable=True) == value_key({"a": [1]}, mutable=True)
    assert value_key(np.ones(3), mutable=True) == value_key(np.ones(3), mutable=True)


def test_repeated_equations_share_texts_not_attrs():
    from bryo_mox import make_mox
    from bryo_mox.document import shared_texts, to_document

    mox = make_mox(lambda v: jnp.reshape(jnp.reshape(v, (4, 2)).ravel() * 2.0, (4, 2)))(jnp.ones(8))
    doc = to_document(mox)
    shapes = [(4, 2)]
    first, second = [c for c in doc.children if c.attrs.get("new_sizes") in shapes]
    assert shared_texts(first) is shared_texts(second) is not None
    assert first.attrs is not second.attrs
    second.attrs["new_sizes"] = (2, 4)  # a changed attr is no longer the shared texts'
    assert shared_texts(second) is None and shared_texts(first) is not None


def test_attr_reader_decodes_equal_attributes_once_into_separate_dicts():
    from bryo_mox.document import AttrReader

    read = AttrReader()
    items = [("new_sizes", "(2, 3)"), ("dimensions", "None")]
    first, second = read.attrs(items), read.attrs(list(items))
    assert first == second == {"new_sizes": (2, 3), "dimensions": None}
    assert first is not second
    array = [("a", "array('AAAAAA==', dtype('float32'), (1,))")]
    one, two = read.attrs(array)["a"], read.attrs(array)["a"]
    assert one.tolist() == two.tolist() == [0.0] and one is not two  # arrays: each its own


def test_repeated_literals_load_with_their_own_types_and_arrays():
    from bryo_mox import make_mox
    from bryo_mox._ir import Equation, Literal, iter_nodes
    from bryo_mox._load import from_document
    from bryo_mox.document import loading, to_document

    def f(x, i):
        y = x * 2.0 + x * 2.0 + x * np.float32(2.0) + x * np.float32(2.0)
        return y + x * -0.0 + x * 0.0, i + 1 + i * 1

    mox = make_mox(f)(jnp.ones(3), jnp.int32(4))
    with loading(1 << 20, None):
        loaded = from_document(to_document(mox))

    def literals(m):
        nodes = [n for n in iter_nodes(m.block) if isinstance(n, Equation)]
        return [a for n in nodes for a in n.invars if isinstance(a, Literal)]

    def seen(a):
        return np.asarray(a.val).dtype, repr(np.asarray(a.val).item()), a.aval

    before, after = literals(mox), literals(loaded)
    assert len(after) == len(before) >= 8
    assert [seen(a) for a in after] == [seen(a) for a in before]
    strong = [a.val for a in after if isinstance(a.val, np.ndarray)]
    assert len(strong) >= 2 and len({id(v) for v in strong}) == len(strong)


@given(
    st.one_of(
        st.floats().map(repr),
        st.integers(-(2**70), 2**70).map(str),
        st.text(alphabet="0123456789.-+eE_ ", max_size=22),
    )
)
def test_plain_numbers_are_read_as_ast_reads_them(text):
    import ast

    from bryo_mox._codec import _eval, plain_number

    number = plain_number(text)
    if number is None:
        return
    want = _eval(ast.parse(text, mode="eval").body)
    assert type(number) is type(want) and repr(number) == repr(want)
    assert repr(decode(text)) == repr(decode_attr(text)) == repr(number)


def test_attribute_texts_are_decoded_once_per_process_and_arrays_each_time(monkeypatch):
    from bryo_mox import clear_caches, document

    clear_caches()
    calls: list[str] = []
    real = document.decode_attr
    monkeypatch.setattr(document, "decode_attr", lambda text: calls.append(text) or real(text))
    dims, name = "(((1,), (0,)), ((), ()))", "relu"
    first, second = document.AttrReader(), document.AttrReader()  # two files
    assert first(dims) == second(dims) == (((1,), (0,)), ((), ()))
    assert first(name) == second(name) == "relu"
    assert second("1") == 1 and second("True") is True and second("None") is None
    # the second file found them decoded; a plain number is read without decode_attr
    assert calls == [dims, name, "True", "None"]
    array = "array('AACAPw==', dtype('float32'), (1,))"
    a, b = first(array), second(array)
    assert a is not b and calls.count(array) == 2  # made and counted by each load
    long = "(" + "1, " * 300 + ")"  # longer than the texts kept
    assert first(long) == second(long) and calls.count(long) == 2
    clear_caches()
    assert document.AttrReader()(dims) == (((1,), (0,)), ((), ())) and calls.count(dims) == 2


def test_xml_names_are_told_apart_when_asked_again():
    from bryo_mox._attrs import equation_tag, is_xml_name

    names = {"add": True, "x.y-z": True, "_a": True, "xmlns": False, "XMLa": False, "1a": False}
    names.update({"a b": False, "a:b": False, "": False})
    for _ in range(2):  # answers are cached: the second round reads them back
        assert {name: is_xml_name(name) for name in names} == names
    assert equation_tag("region") == ("eqn", {"primitive": "region"})
    assert equation_tag("a b") == ("eqn", {"primitive": "a b"}) and equation_tag("sin") == (
        "sin",
        {},
    )
