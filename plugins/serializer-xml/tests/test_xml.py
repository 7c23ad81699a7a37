import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree

import bryo_mox as yax
from bryo_mox import MoxSerializationError
from bryo_mox.document import loading
from bryo_mox.testing import MLP, Linear, LoRA, Module, ResBlock, assert_round_trip
from bryo_xml import _xml as bryo_xml_reader

X = jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)


def test_resblock_round_trip_and_schema(toy):
    block = ResBlock(4, key=jax.random.key(0))
    mox = yax.make_mox(lambda m, v: m(v))(block, X)
    text = yax.dumps(mox, format="xml")
    root = etree.fromstring(text)
    (dense,) = root.xpath('//module_call[@type="Linear"]')
    assert dense.get("features") == "4" and dense.get("name") == "dense"
    assert dense.get("qualtype") == "bryo_mox.testing.Linear"
    assert [i.get("type") for i in dense.findall("input")] == ["f32[4,4]", "f32[4]", "f32[2,4]"]
    assert dense.find("dot_general").get("dimension_numbers") == "(((1,), (0,)), ((), ()))"
    back = assert_round_trip(mox, "xml", block, X)
    assert [n.name for n in yax.query("//module_call", back)] == ["", "dense"]


def test_relu_grad_at_zero_survives(bryo_plugin_manager):
    mox = yax.make_mox(lambda v: jax.nn.relu(v) * 3.0)(0.0)
    back = yax.loads(yax.dumps(mox))
    assert back.nodes[0].primitive.name == "custom_jvp_call"
    assert jax.grad(lambda v: yax.eval_mox(back, v))(0.0) == 0.0
    assert jax.grad(lambda v: yax.eval_mox(back, v))(2.0) == 3.0


def test_custom_vjp_rule_survives(bryo_plugin_manager):
    @jax.custom_vjp
    def clip_grad(v):
        return v * 1.0

    clip_grad.defvjp(lambda v: (v, None), lambda _, g: (jnp.clip(g, -0.5, 0.5),))
    mox = yax.make_mox(lambda v: clip_grad(v) * 4.0)(1.0)
    back = yax.loads(yax.dumps(mox))
    assert jax.grad(lambda v: yax.eval_mox(back, v))(1.0) == 0.5


@jax.custom_vjp
def _clip_grad(v):
    return v * 1.0


_clip_grad.defvjp(lambda v: (v, None), lambda _, g: (jnp.clip(g, -0.5, 0.5),))


@pytest.mark.parametrize("fmt", ["xml", "yson"])
@pytest.mark.parametrize(
    "f",
    [lambda v: jax.jit(jnp.tanh)(jax.nn.relu(v * 2.0)), lambda v: _clip_grad(v) * 3.0],
    ids=["custom_jvp", "custom_vjp"],
)
def test_saving_a_loaded_custom_derivative_gives_the_same_file(bryo_plugin_manager, fmt, f):
    text = yax.dumps(yax.make_mox(f)(X), format=fmt)
    for _ in range(3):  # a rule's region once held its primal again at every save
        back = yax.loads(text, format=fmt)
        assert yax.dumps(back, format=fmt) == text
    grad = jax.grad(lambda v: yax.eval_mox(back, v).sum())(X)
    np.testing.assert_allclose(grad, jax.grad(lambda v: f(v).sum())(X), rtol=1e-6)


def test_higher_order_primitives(bryo_plugin_manager):
    def f(v):
        carry, ys = jax.lax.scan(lambda c, e: (c + jnp.sin(e), c * e), 0.0, v)
        branch = jax.lax.cond(v[0] > 0, jnp.cos, jnp.sin, v)
        return carry + ys.sum() + branch.sum() + jax.checkpoint(jnp.tanh)(v).sum()

    mox = yax.make_mox(f)(jnp.arange(3.0))
    back = assert_round_trip(mox, "xml", jnp.arange(3.0))
    g = jax.grad(lambda v: yax.eval_mox(back, v))(jnp.arange(3.0))
    np.testing.assert_allclose(g, jax.grad(f)(jnp.arange(3.0)), rtol=1e-5)


@pytest.mark.slow
@settings(max_examples=5, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=2, max_size=4), st.integers(1, 3))
def test_random_mlp_round_trip(sizes, batch):
    from bryo_mox.testing import ToyBackend
    from bryo_plugins import new_plugin_manager, use_plugin_manager

    pm = new_plugin_manager()
    pm.register(ToyBackend())
    with use_plugin_manager(pm):
        model = MLP(tuple(sizes), key=jax.random.key(len(sizes)))
        v = jnp.ones((batch, sizes[0]))
        mox = yax.make_mox(lambda m, x: m(x))(model, v)
        back = assert_round_trip(mox, "xml", model, v)
        assert len(yax.query('//module_call[@type="Linear"]', back)) == len(sizes) - 1


def test_lora_extra_params_round_trip(toy):
    model = MLP((4, 4, 4), key=jax.random.key(0))
    lora = LoRA(Linear(4, 4, key=jax.random.key(1)), rank=2, key=jax.random.key(2))
    mox = yax.make_mox(lambda m, v: m(v))(model, X)
    new = yax.sub(
        '//module_call[@type="Linear"]',
        yax.make_mox(lambda m, v: m(v))(lora, X),
        mox,
        with_state=True,
    )
    extra = {k: jnp.full(s.shape, 0.3, s.dtype) for k, s in new.extra_params}
    back = assert_round_trip(new, "xml", model, X, extra)
    assert back.extra_params == new.extra_params


def test_constants_and_plain_tree(toy):
    layer = Linear(4, 3, key=jax.random.key(3))
    mox = yax.make_mox(lambda d: {"y": layer(d["x"]), "n": None})({"x": X})
    back = assert_round_trip(mox, "xml", {"x": X})
    assert back.in_tree == mox.in_tree and back.out_tree == mox.out_tree


def test_dump_load_by_extension(toy, tmp_path):
    mox = yax.make_mox(jax.nn.gelu)(X)
    yax.dump(mox, tmp_path / "gelu.xml")
    assert (tmp_path / "gelu.xml").read_text().startswith("<mox")
    np.testing.assert_allclose(yax.eval_mox(yax.load(tmp_path / "gelu.xml"), X), jax.nn.gelu(X))
    with pytest.raises(yax.MoxError, match="extension"):
        yax.dump(mox, tmp_path / "gelu.txt")
    with pytest.raises(yax.MoxError, match="must be a Mox"):
        yax.dump(mox.block, tmp_path / "block.xml")
    assert not (tmp_path / "block.xml").exists()


def test_unserializable_param_names_equation(bryo_plugin_manager):
    mox = yax.make_mox(lambda v: jax.pure_callback(np.sin, v, v))(X)
    with pytest.raises(MoxSerializationError, match="pure_callback"):
        yax.dumps(mox)


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
]>
<mox name="&lol4;"><outputs type="f32[]" value="0.0"/></mox>"""


def test_billion_laughs_rejected(bryo_plugin_manager):
    with pytest.raises(MoxSerializationError, match=r"DTD.*line 2"):
        yax.loads(BILLION_LAUGHS)


def test_external_entity_rejected(bryo_plugin_manager, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    hostile = (
        f'<?xml version="1.0"?><!DOCTYPE m [<!ENTITY x SYSTEM "file://{secret}">]>'
        '<mox><outputs type="f32[]" value="0.0"/><add name="&x;"/></mox>'
    )
    with pytest.raises(MoxSerializationError) as info:
        yax.loads(hostile)
    assert "TOP-SECRET" not in str(info.value)
    # Even past our DTD check, lxml is configured not to resolve entities.
    from bryo_xml._xml import _parser

    try:
        tree = etree.fromstring(hostile.encode(), _parser())
    except etree.XMLSyntaxError:
        return
    assert "TOP-SECRET" not in etree.tostring(tree).decode()


def test_deep_nesting_rejected(bryo_plugin_manager):
    deep = "<mox>" + "<jit>" * 5000 + "</jit>" * 5000 + "</mox>"
    with pytest.raises(MoxSerializationError):
        yax.loads(deep)
    medium = "<mox>" + "<jit>" * 230 + "</jit>" * 230 + "</mox>"
    with pytest.raises(MoxSerializationError, match="deeper"):
        yax.loads(medium)


def test_malformed_reports_line(bryo_plugin_manager):
    with pytest.raises(MoxSerializationError, match="line 3"):
        yax.loads("<mox>\n<add>\n</mox>")


@pytest.mark.parametrize(
    "text, message",
    [
        ("<mox><foo_bar_p/></mox>", "unknown primitive"),
        ('<mox><outputs type="f32[2]">q</outputs></mox>', "before it is defined"),
        ("<mox><input>a</input></mox>", "type"),
        ('<mox><input type="f99[2]">a</input></mox>', "dtype"),
        (
            "<mox><integer_pow y=\"__import__('os').system('true')\"><input type=\"f32[]\" "
            'value="1.0"/><output type="f32[]">b</output></integer_pow></mox>',
            "integer_pow",
        ),
    ],
)
def test_bad_documents(bryo_plugin_manager, text, message):
    with pytest.raises(MoxSerializationError, match=message):
        yax.loads(text)


def test_sub_array_dtype_param_does_not_allocate(bryo_plugin_manager):
    """`array(0, '(8000,8000)f8')` once allocated 488 MiB from a 320-byte file."""
    import tracemalloc

    text = (
        '<mox><input type="f32[2]">a</input>'
        '<integer_pow y="array(0, \'(8000,8000)f8\')"><input type="f32[2]">a</input>'
        '<output type="f32[2]">b</output></integer_pow>'
        '<outputs type="f32[2]">b</outputs></mox>'
    )
    tracemalloc.start()
    try:
        with pytest.raises(MoxSerializationError, match="line 1"):
            yax.loads(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20


def test_compact_array_param_over_budget(bryo_plugin_manager):
    text = (
        '<mox><input type="f32[2]">a</input>\n'
        "<add foo=\"array('AAAA', dtype('float64'), (8000, 8000))\">"
        '<input type="f32[2]">a</input></add></mox>'
    )
    with pytest.raises(yax.MoxLimitError, match=r"array budget.*line 2"):
        yax.loads(text)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32"])
def test_other_encodings_are_refused(bryo_plugin_manager, encoding):
    hostile = BILLION_LAUGHS.decode().replace(
        'version="1.0"', f'version="1.0" encoding="{encoding}"'
    )
    with pytest.raises(MoxSerializationError, match="UTF-8"):
        yax.loads(hostile.encode(encoding))


def test_declared_encoding_must_be_utf8(bryo_plugin_manager):
    text = '<?xml version="1.0" encoding="ISO-8859-1"?>\n<mox/>'
    with pytest.raises(MoxSerializationError, match=r"ISO-8859-1.*line 1"):
        yax.loads(text.encode("latin-1"))
    with pytest.raises(MoxSerializationError, match=r"UTF-8: byte 0xe9"):
        yax.loads(b"<mox name='\xe9'/>")


def test_errors_carry_line_and_position(bryo_plugin_manager):
    text = (
        '<mox>\n  <input type="f32[2]">a</input>\n'
        '  <add><input type="f32[2]">a</input><input type="f32[3]">a</input>'
        '<output type="f32[2]">b</output></add>\n</mox>'
    )
    with pytest.raises(MoxSerializationError) as info:
        yax.loads(text)
    assert (info.value.line, info.value.position) == (3, 38)
    assert "declares `a` as f32[3], but `a` is f32[2]" in str(info.value)


def test_comments_and_cdata_are_not_declarations(bryo_plugin_manager):
    mox = yax.make_mox(jnp.sin)(X)
    text = yax.dumps(mox).replace("<mox ", "<!-- a comment --><mox ", 1)
    assert yax.query("//sin", yax.loads(text))


class _Nest(Module):
    """`sin(inner(x))`: module calls nest as deep as the modules do."""

    def __init__(self, inner):
        self.inner = inner

    def forward(self, x):
        return jnp.sin(x if self.inner is None else self.inner(x))


def test_indentation_stops_at_max_indent_so_deep_files_stay_linear(toy):
    from bryo_xml._xml import MAX_INDENT

    model = None
    for _ in range(40):
        model = _Nest(model)
    mox = yax.make_mox(model)(X)
    text = yax.dumps(mox, format="xml")
    pads = [len(line) - len(line.lstrip(" ")) for line in text.splitlines()]
    assert max(pads) == 2 * MAX_INDENT + 2  # the ports of the deepest indented element
    assert pads[:3] == [0, 2, 2]  # shallow levels: two spaces per level, as before
    back = yax.loads(text)
    np.testing.assert_allclose(yax.eval_mox(back, X), model(X), rtol=1e-6)
    assert yax.dumps(back, format="xml") == text


def test_derivative_rules_are_traced_once_per_mox(bryo_plugin_manager, monkeypatch):
    from bryo_mox import _rules

    calls = []
    trace = _rules.derivative_rule_regions
    monkeypatch.setattr(_rules, "derivative_rule_regions", lambda n: calls.append(n) or trace(n))
    mox = yax.make_mox(lambda v: jax.nn.relu(jnp.sin(v)) + jax.nn.relu(v))(X)
    first = yax.dumps(mox)
    assert yax.dumps(mox) == first and yax.dumps(mox, format="yson")
    assert [len(nodes) for nodes in calls] == [2]  # both ReLUs, traced together, once
    assert yax.dumps(yax.loads(first)) == first
    assert len(calls) == 2  # a loaded MoX traces its own rules


def test_dumps_and_loads_leave_the_garbage_collector_as_they_found_it(bryo_plugin_manager):
    import gc

    mox = yax.make_mox(jnp.sin)(1.0)
    text = yax.dumps(mox)
    assert gc.isenabled()
    yax.loads(text)
    assert gc.isenabled()
    with pytest.raises(MoxSerializationError):
        yax.loads(text.replace("<sin", "<sin oops"))
    assert gc.isenabled()
    gc.disable()
    try:
        yax.loads(yax.dumps(mox))
        assert not gc.isenabled()
    finally:
        gc.enable()


# The loader remembers each (computed type, declared type text) pair it checked and skips
# the check for the next port like it; these make sure a remembered pair never lets a
# wrong declaration, an undefined variable or a second definition through.


def _adds(*lines: str) -> str:
    return '<mox>\n  <input type="f32[2]">a</input>\n' + "".join(lines) + "</mox>"


def _add(x: str, y: str, out: str, out_type: str = "f32[2]", in_type: str = "f32[2]") -> str:
    return (
        f'  <add><input type="{in_type}">{x}</input><input type="{in_type}">{y}</input>'
        f'<output type="{out_type}">{out}</output></add>\n'
    )


def test_checked_types_still_refuse_a_wrong_later_declaration(bryo_plugin_manager):
    good = [_add("a", "a", "b"), _add("b", "a", "c"), _add("c", "b", "d")]
    back = yax.loads(_adds(*good, '  <outputs type="f32[2]">d</outputs>\n'))
    np.testing.assert_allclose(yax.eval_mox(back, jnp.ones(2))[0], 5 * jnp.ones(2))
    wrong = r"declares `c` as f32\[3\], but `c` is f32\[2\]"
    with pytest.raises(MoxSerializationError, match=wrong):
        yax.loads(_adds(*good, _add("c", "c", "e", in_type="f32[3]")))
    with pytest.raises(MoxSerializationError, match=r"output `e` is declared f32\[3\]") as info:
        yax.loads(_adds(*good, _add("c", "c", "e", out_type="f32[3]")))
    assert info.value.line == 6
    with pytest.raises(MoxSerializationError, match="defines variable `c` twice"):
        yax.loads(_adds(*good, _add("c", "c", "c")))
    with pytest.raises(MoxSerializationError, match="`z` is used in <add> before it is defined"):
        yax.loads(_adds(*good, _add("c", "z", "e")))


def test_weak_and_strong_spellings_of_a_type_both_read(bryo_plugin_manager):
    # `same_type` ignores weak typing: the first spelling is checked, the second too
    text = _adds(
        _add("a", "a", "b"),
        _add("b", "b", "c", in_type="f32[2]{weak}"),
        _add("b", "c", "d"),
        '  <outputs type="f32[2]">d</outputs>\n',
    )
    back = yax.loads(text)
    np.testing.assert_allclose(yax.eval_mox(back, jnp.ones(2))[0], 6 * jnp.ones(2))


def test_nodes_with_equal_attributes_share_decoded_params_but_not_arrays():
    # the reader makes a node with another's attribute texts from that node's decoded
    # attrs; an array param is decoded and counted for every node that holds it
    node = (
        '<eqn primitive="add" n="(1, 2)" foo="array(\'AAAAAAAAAAA=\', dtype(\'float32\'), (2,))">'
        '<input type="f32[2]">a</input><output type="f32[2]">{out}</output></eqn>\n'
    )
    text = f"<mox>\n{node.format(out='b')}{node.format(out='c')}</mox>".encode()
    with loading(len(text), yax.Limits(array_bytes=16)):
        doc = bryo_xml_reader.loads(text)
    first, second = doc.children
    assert first.tag == second.tag == "add" and first.attrs_key == second.attrs_key
    assert first.attrs["n"] == second.attrs["n"] == (1, 2)
    assert first.attrs["foo"] is not second.attrs["foo"]
    assert [p.name for p in second.outputs] == ["c"] and second.source.line == 3
    with loading(len(text), yax.Limits(array_bytes=12)):
        with pytest.raises(yax.MoxLimitError, match=r"array budget.*line 3"):
            bryo_xml_reader.loads(text)


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=40) | st.lists(st.sampled_from([b"<", b"/", b"!", b"?", b"a"])).map(b"".join)
)
def test_the_element_bound_counts_what_opens_an_element(raw):
    # `<` not followed by `/`, `!` or `?` (the limit check before lxml parses anything)
    expected = raw.count(b"<") - raw.count(b"</") - raw.count(b"<!") - raw.count(b"<?")
    assert bryo_xml_reader._element_bound(raw) == expected


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=6), st.sampled_from(["xml", "yson"]))
def test_a_file_loads_alike_from_its_text_and_its_utf8_bytes(name, fmt):
    """Text that is all ASCII skips the UTF-8 checks; any other text (non-ASCII names,
    even a lone surrogate) reads as its bytes read."""

    def f(v):
        return v * 2.0

    f.__name__ = f.__qualname__ = name
    try:
        text = yax.dumps(yax.make_mox(jax.jit(f))(X), format=fmt)
    except MoxSerializationError:
        return  # a name this format cannot hold: refused when writing
    outcomes = []
    for data in (text, text.encode("utf-8", "surrogatepass")):
        try:
            outcomes.append(yax.dumps(yax.loads(data, format=fmt), format=fmt))
        except MoxSerializationError as error:
            outcomes.append((error.line, error.position, str(error)))
    assert outcomes[0] == outcomes[1]


_RESULT = '  <outputs type="f32[2]">{}</outputs>'


@pytest.mark.parametrize(
    ("body", "where"),
    [
        # an input, an output and a result each point at their own element on the line
        (_add("a", "z", "b") + _RESULT.format("b") + "\n", (3, 38)),
        (_add("a", "a", "b", out_type="f32[3]") + _RESULT.format("b") + "\n", (3, 68)),
        (_add("a", "a", "b") + _RESULT.format("b") + _RESULT.format("z")[2:] + "\n", (4, 37)),
    ],
)
def test_port_errors_name_the_ports_own_line_and_column(bryo_plugin_manager, body, where):
    # the common ports share one source, resolved from their node only on an error
    with pytest.raises(MoxSerializationError) as info:
        yax.loads(_adds(body))
    assert (info.value.line, info.value.position) == where
