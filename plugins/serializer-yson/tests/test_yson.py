import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yt.yson as yson

import bryo_mox as yax
from bryo_mox import MoxSerializationError
from bryo_mox.testing import MLP, Linear, LoRA, ResBlock, assert_round_trip

X = jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)


def test_resblock_round_trip_typed_attributes(toy):
    block = ResBlock(4, key=jax.random.key(0))
    mox = yax.make_mox(lambda m, v: jax.nn.relu(m(v)))(block, X)
    text = yax.dumps(mox, format="yson")
    tree = yson.loads(text.encode())
    dense = tree[0][0]
    assert dense.attributes["primitive"] == "module_call"
    assert dense.attributes["type"] == "Linear" and dense.attributes["name"] == "dense"
    assert isinstance(dense.attributes["features"], int)  # typed, not a string
    dot = dense[0]
    assert dot.attributes["primitive"] == "dot_general"
    assert list(dot.attributes["dimension_numbers"]) == [[[1], [0]], [[], []]]
    assert [p["type"] for p in dense.attributes["inputs"]] == ["f32[4,4]", "f32[4]", "f32[2,4]"]
    back = assert_round_trip(mox, "yson", block, X)
    assert jax.grad(lambda v: yax.eval_mox(back, block, v).sum())(jnp.zeros((2, 4))).shape == (2, 4)


def test_relu_grad_at_zero_survives(bryo_plugin_manager):
    back = yax.loads(yax.dumps(yax.make_mox(jax.nn.relu)(0.0), "yson"), "yson")
    assert jax.grad(lambda v: yax.eval_mox(back, v))(0.0) == 0.0


def test_mlp_and_lora_round_trip(toy):
    model = MLP((4, 4, 4), key=jax.random.key(0))
    lora = LoRA(Linear(4, 4, key=jax.random.key(1)), rank=2, key=jax.random.key(2))
    mox = yax.make_mox(lambda m, v: m(v))(model, X)
    assert_round_trip(mox, "yson", model, X)
    new = yax.sub(
        '//module_call[@type="Linear"]',
        yax.make_mox(lambda m, v: m(v))(lora, X),
        mox,
        with_state=True,
    )
    extra = {k: jnp.full(s.shape, 0.3, s.dtype) for k, s in new.extra_params}
    assert_round_trip(new, "yson", model, X, extra)


def test_scan_and_constants(toy):
    layer = Linear(4, 4, key=jax.random.key(3))

    def f(v):
        return jax.lax.scan(lambda c, e: (layer(c) + e, c.sum()), v[0], v)

    mox = yax.make_mox(f)(X)
    assert_round_trip(mox, "yson", X)


def test_dump_load_by_extension(toy, tmp_path):
    mox = yax.make_mox(jnp.tanh)(X)
    yax.dump(mox, tmp_path / "m.yson")
    np.testing.assert_allclose(yax.eval_mox(yax.load(tmp_path / "m.yson"), X), jnp.tanh(X))


def test_malformed_reports_position(bryo_plugin_manager):
    with pytest.raises(MoxSerializationError, match=r"malformed YSON.*line 2"):
        yax.loads('<primitive="mox">[\n  <primitive="add"]', "yson")


def test_deep_nesting_rejected(bryo_plugin_manager):
    with pytest.raises(MoxSerializationError, match="deeper"):
        yax.loads("[" * 100_000 + "]" * 100_000, "yson")


def test_binary_yson_rejected(bryo_plugin_manager):
    with pytest.raises(MoxSerializationError, match="binary"):
        yax.loads(yson.dumps([1, 2], yson_format="binary"), "yson")


def test_missing_primitive_and_hostile_param(bryo_plugin_manager):
    with pytest.raises(MoxSerializationError, match="primitive"):
        yax.loads("[]", "yson")
    hostile = (
        '<primitive="mox"; inputs=[]; results=[{name="b"; type="f32[]"}]>['
        '<primitive="integer_pow"; y=<py=%true>"__import__(\'os\')"; '
        'inputs=[{type="f32[]"; value=1.0}]; outputs=[{name="b"; type="f32[]"}]>#]'
    )
    with pytest.raises(MoxSerializationError):
        yax.loads(hostile, "yson")


def test_key_that_xml_cannot_hold_is_refused(bryo_plugin_manager):
    text = yax.dumps(yax.make_mox(jnp.sin)(X), "yson").replace(
        '"primitive"="sin"', '"primitive"="sin";"my key"=1'
    )
    with pytest.raises(MoxSerializationError, match=r"'my key'.*XPath.*path /0"):
        yax.loads(text, "yson")


def test_value_count_bounds_memory(bryo_plugin_manager):
    many = "[" + "1;" * 200_000 + "]"
    with pytest.raises(yax.MoxLimitError, match="nodes"):
        yax.loads(many, "yson", limits=yax.Limits(max_nodes=10_000))


def test_errors_carry_line_position_and_path(bryo_plugin_manager):
    text = yax.dumps(yax.make_mox(lambda v: jnp.sin(v) + 1.0)(X), "yson")
    bad = text.replace('"outputs"=[{"type"="f32[2,4]"', '"outputs"=[{"type"="f32[9]"', 1)
    with pytest.raises(MoxSerializationError) as info:
        yax.loads(bad, "yson")
    error = info.value
    assert error.path == "/0/@outputs/0" and error.line == 2 and error.position == 3
    with pytest.raises(MoxSerializationError) as info:
        yax.loads('<"primitive"="mox">[\n  <"primitive"="add">#;\n  ]]', "yson")
    assert (info.value.line, info.value.position) == (3, 4)


def test_files_written_by_yt_yson_read_the_same(toy):
    yt_yson = pytest.importorskip("yt.yson")
    block = ResBlock(4, key=jax.random.key(0))
    mox = yax.make_mox(lambda m, v: jax.nn.relu(m(v)))(block, X)
    ours = yax.dumps(mox, "yson")
    theirs = yt_yson.dumps(yt_yson.loads(ours.encode()), yson_format="pretty")
    from bryo_mox.testing import document_signature

    assert document_signature(yax.loads(theirs, "yson")) == document_signature(mox)


def test_integers_past_64_bits_are_refused(bryo_plugin_manager):
    with pytest.raises(MoxSerializationError, match="64-bit"):
        yax.loads("<primitive=mox; n=" + "9" * 100 + ">#", "yson")


@pytest.mark.parametrize("escape", ["", "\\n"], ids=["fast reader", "exact reader"])
def test_attrs_key_equal_exactly_for_equal_attrs(escape):
    from bryo_yson._yson import loads

    values = ["%true", "1", "1.0", "0.0", "-0.0", '"1"', "[1]", "[%true]", "#"]
    values += ['<"py"=%true>"(4,)"', '<"py"=%true>"(4,)"', "1", f'"x{escape}"', f'"x{escape}"']
    children = ";".join(f'<"primitive"="p";"a"={v};"inputs"=[];"results"=[]>#' for v in values)
    doc = loads(f'<"primitive"="m";"inputs"=[];"results"=[]>[{children}]')
    keys = [child.attrs_key for child in doc.children]
    for i, a in enumerate(doc.children):
        for j, b in enumerate(doc.children):
            same = type(a.attrs["a"]) is type(b.attrs["a"]) and repr(a.attrs) == repr(b.attrs)
            assert (keys[i] == keys[j]) == same, (values[i], values[j])


@pytest.mark.parametrize("escape", ["", "\\n"], ids=["fast reader", "exact reader"])
def test_equal_attrs_decode_once_into_separate_dicts(escape):
    from bryo_yson._yson import loads

    array = "<\"py\"=%true>\"array('AAAAAA==', dtype('float32'), (1,))\""
    values = ["7", "[2;3]", "[2;3]", array, array, f'"x{escape}"', f'"x{escape}"']
    children = ";".join(f'<"primitive"="p";"a"={v};"inputs"=[];"results"=[]>#' for v in values)
    doc = loads(f'<"primitive"="m";"inputs"=[];"results"=[]>[{children}]')
    first, second = doc.children[1], doc.children[2]
    assert first.attrs == second.attrs == {"a": (2, 3)} and first.attrs is not second.attrs
    one, two = doc.children[3].attrs["a"], doc.children[4].attrs["a"]
    assert one.tolist() == two.tolist() == [0.0] and one is not two  # arrays: each its own
    assert doc.children[5].attrs == doc.children[6].attrs == {"a": "x" + ("\n" if escape else "")}


def test_pickle_round_trip(toy):
    import pickle

    model = MLP((4, 4, 4), key=jax.random.key(0))
    mox = yax.make_mox(lambda m, v: m(v))(model, X)
    back = pickle.loads(pickle.dumps(mox))
    # the block travels as the file text: it reads back as `loads(dumps(mox))` does
    assert yax.dumps(back) == yax.dumps(yax.loads(yax.dumps(mox)))
    assert (back.in_tree, back.out_tree) == (mox.in_tree, mox.out_tree)
    np.testing.assert_array_equal(yax.eval_mox(back, model, X), yax.eval_mox(mox, model, X))
    calls = yax.query("//module_call", back)
    assert [c.name for c in calls] == [c.name for c in yax.query("//module_call", mox)]
    info = calls[1].info
    assert pickle.loads(pickle.dumps(info)) == info and dict(info.attrs)


def test_pickle_keeps_what_files_drop(bryo_plugin_manager):
    import pickle

    # a static leaf (the string) is not in a file; a pickle carries it
    mox = yax.make_mox(lambda v, mode: v * 2.0 if mode == "double" else v)(X, "double")
    assert mox.static_leaves
    back = pickle.loads(pickle.dumps(mox))
    assert back.static_leaves == mox.static_leaves and back.in_tree == mox.in_tree
    np.testing.assert_array_equal(yax.eval_mox(back, X, "double"), 2.0 * X)


def test_pickle_format_fallback_and_error(bryo_plugin_manager, monkeypatch):
    import pickle

    from bryo_mox import MoxError, _serialize

    mox = yax.make_mox(lambda v: jnp.tanh(v) + 1.0)(X)
    monkeypatch.setattr(_serialize, "PICKLE_FORMATS", ("no-such-format", "xml"))
    data = pickle.dumps(mox)
    assert b"<mox" in data  # written as XML: the first format is not installed
    np.testing.assert_allclose(yax.eval_mox(pickle.loads(data), X), jnp.tanh(X) + 1.0)
    monkeypatch.setattr(_serialize, "PICKLE_FORMATS", ("no-such-format",))
    with pytest.raises(MoxError, match="needs a serializer plugin"):
        pickle.dumps(mox)
