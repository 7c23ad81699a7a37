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
